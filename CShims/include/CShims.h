// CShims: the C surface dbx-mount needs from libfuse3 and libcurl, and wrappers for the parts of
// those APIs that Swift cannot call directly (macros, variadic functions, bitfields).
// Every wrapper carries the dbx_ prefix and holds no logic.
#ifndef DBX_CSHIMS_H
#define DBX_CSHIMS_H

// Must precede the fuse3 headers: it selects the API generation (3.12+: opaque loop config).
#define FUSE_USE_VERSION 312

#include <fuse3/fuse_lowlevel.h>
#include <curl/curl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <malloc.h>   // mallopt: a fixed mmap threshold for read-ahead buffers (FUSESession)

#pragma clang assume_nonnull begin

// fuse_session_new takes sizeof(ops), which Swift cannot compute for the C struct's ABI size.
struct fuse_session *_Nullable dbx_fuse_session_new(struct fuse_args *args,
                                                    const struct fuse_lowlevel_ops *ops,
                                                    void *_Nullable userdata);

// SO_PEERCRED's struct ucred needs _GNU_SOURCE, which Swift's Glibc module does not define: the
// uid of the process at the other end of a Unix socket, or -1 with errno set.
long dbx_socket_peer_uid(int fd);

// fuse_session_loop_mt is a version-selecting macro, and its config is an opaque builder.
int dbx_fuse_session_loop_mt(struct fuse_session *se, int clone_fd, unsigned max_threads, unsigned max_idle_threads);

// fuse_file_info's flags are bitfields; these set them without relying on Swift's bitfield import.
void dbx_fi_set_keep_cache(struct fuse_file_info *fi, int on);
void dbx_fi_set_direct_io(struct fuse_file_info *fi, int on);
void dbx_fi_set_cache_readdir(struct fuse_file_info *fi, int on);

// curl_easy_setopt and curl_easy_getinfo are variadic; one typed wrapper per argument kind.
CURLcode dbx_curl_setopt_long(CURL *h, CURLoption opt, long value);
CURLcode dbx_curl_setopt_off(CURL *h, CURLoption opt, curl_off_t value);
CURLcode dbx_curl_setopt_str(CURL *h, CURLoption opt, const char *_Nullable value);
CURLcode dbx_curl_setopt_ptr(CURL *h, CURLoption opt, void *_Nullable value);
CURLcode dbx_curl_setopt_slist(CURL *h, CURLoption opt, struct curl_slist *_Nullable value);
typedef size_t (*dbx_curl_data_cb)(char *data, size_t size, size_t nmemb, void *_Nullable userdata);
CURLcode dbx_curl_setopt_write_function(CURL *h, dbx_curl_data_cb _Nullable cb);
CURLcode dbx_curl_setopt_header_function(CURL *h, dbx_curl_data_cb _Nullable cb);
typedef int (*dbx_curl_progress_cb)(void *_Nullable userdata, curl_off_t dltotal, curl_off_t dlnow,
                                    curl_off_t ultotal, curl_off_t ulnow);
CURLcode dbx_curl_setopt_xferinfo_function(CURL *h, dbx_curl_progress_cb _Nullable cb);
CURLcode dbx_curl_getinfo_long(CURL *h, CURLINFO info, long *out);
CURLcode dbx_curl_getinfo_off(CURL *h, CURLINFO info, curl_off_t *out);

#pragma clang assume_nonnull end

#endif
