#define _GNU_SOURCE
#include <sys/socket.h>
#include "CShims.h"

long dbx_socket_peer_uid(int fd) {
    struct ucred credentials;
    socklen_t length = sizeof(credentials);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -1;
    return (long)credentials.uid;
}

struct fuse_session *dbx_fuse_session_new(struct fuse_args *args,
                                          const struct fuse_lowlevel_ops *ops, void *userdata) {
    return fuse_session_new(args, ops, sizeof(*ops), userdata);
}

int dbx_fuse_session_loop_mt(struct fuse_session *se, int clone_fd, unsigned max_threads, unsigned max_idle_threads) {
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    if (config == NULL) return -ENOMEM;
    fuse_loop_cfg_set_clone_fd(config, (unsigned)clone_fd);
    fuse_loop_cfg_set_max_threads(config, max_threads);
    fuse_loop_cfg_set_idle_threads(config, max_idle_threads);
    int result = fuse_session_loop_mt(se, config);
    fuse_loop_cfg_destroy(config);
    return result;
}

void dbx_fi_set_keep_cache(struct fuse_file_info *fi, int on) { fi->keep_cache = on ? 1 : 0; }
void dbx_fi_set_direct_io(struct fuse_file_info *fi, int on) { fi->direct_io = on ? 1 : 0; }
void dbx_fi_set_cache_readdir(struct fuse_file_info *fi, int on) { fi->cache_readdir = on ? 1 : 0; }

CURLcode dbx_curl_setopt_long(CURL *h, CURLoption opt, long value) { return curl_easy_setopt(h, opt, value); }
CURLcode dbx_curl_setopt_off(CURL *h, CURLoption opt, curl_off_t value) { return curl_easy_setopt(h, opt, value); }
CURLcode dbx_curl_setopt_str(CURL *h, CURLoption opt, const char *value) { return curl_easy_setopt(h, opt, value); }
CURLcode dbx_curl_setopt_ptr(CURL *h, CURLoption opt, void *value) { return curl_easy_setopt(h, opt, value); }
CURLcode dbx_curl_setopt_slist(CURL *h, CURLoption opt, struct curl_slist *value) { return curl_easy_setopt(h, opt, value); }
CURLcode dbx_curl_setopt_write_function(CURL *h, dbx_curl_data_cb cb) { return curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, cb); }
CURLcode dbx_curl_setopt_header_function(CURL *h, dbx_curl_data_cb cb) { return curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, cb); }
CURLcode dbx_curl_setopt_xferinfo_function(CURL *h, dbx_curl_progress_cb cb) { return curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, cb); }
CURLcode dbx_curl_getinfo_long(CURL *h, CURLINFO info, long *out) { return curl_easy_getinfo(h, info, out); }
CURLcode dbx_curl_getinfo_off(CURL *h, CURLINFO info, curl_off_t *out) { return curl_easy_getinfo(h, info, out); }
