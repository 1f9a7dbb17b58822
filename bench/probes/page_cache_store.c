// Probe: what a FUSE daemon pays per GiB to get a sequential reader's bytes into the page cache,
// answering the kernel's reads (as dbx-mount does) or pushing the bytes in ahead of the reader
// with FUSE_NOTIFY_STORE. No network: the bytes come from memory, so only the FUSE side differs.
// docs/reads-over-tls.md, "What the design could still change".
// Usage: page_cache_store MOUNTPOINT MODE
//   reply       reads answered from a 256 MiB ring standing for the read-ahead parts; each read's
//               bytes are first copied into the ring from a 16 KiB buffer with streaming stores,
//               as curl's TLS records are copied into a part; passed pages dropped (drop-behind).
//   store       a thread pushes 256 KiB at a time (records gathered into a buffer) up to 64 MiB
//               ahead of the reader with fuse_lowlevel_notify_store, leaving the last page of each
//               8 MiB unstored: the kernel asks for that page, and so tells where the reader is.
//               Passed pages dropped as in `reply`.
//   reply-keep  `reply` without dropping any page.
// Build and run: bench/probes/page_cache_store.sh.
#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>
#include <emmintrin.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MiB (1ull << 20)
static const uint64_t fileSize = 1024 * MiB, ringSize = 256 * MiB;
// Drop-behind as Sources/DropboxFS/Reading/DropBehind.swift does it.
static const uint64_t dropStep = 8 * MiB, keepBehind = 32 * MiB, keepHead = 4 * MiB;
static const uint64_t storeAhead = 64 * MiB, storeChunk = 256 << 10;
static const fuse_ino_t fileIno = 2;

enum mode { reply, store, replyKeep };
static enum mode mode;
static char *ring;
static char record[16384], gathered[256 << 10];
static struct fuse_session *session;
static _Atomic uint64_t readerAt, reads, readBytes, stores;
static _Atomic int opened, stopping;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t readerMoved = PTHREAD_COND_INITIALIZER;

static void waitForReader(void) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 50 * 1000 * 1000;
    if (until.tv_nsec >= 1000 * 1000 * 1000) { until.tv_sec++; until.tv_nsec -= 1000 * 1000 * 1000; }
    pthread_mutex_lock(&lock);
    pthread_cond_timedwait(&readerMoved, &lock, &until);
    pthread_mutex_unlock(&lock);
}

static void streamingCopy(char *to, const char *from, size_t count) {
    for (size_t i = 0; i < count; i += 16)
        _mm_stream_si128((__m128i *)(to + i), _mm_loadu_si128((const __m128i *)(from + i)));
    _mm_sfence();
}

static void fillAttributes(fuse_ino_t ino, struct stat *st) {
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    if (ino == FUSE_ROOT_ID) { st->st_mode = S_IFDIR | 0755; st->st_nlink = 2; }
    else { st->st_mode = S_IFREG | 0444; st->st_nlink = 1; st->st_size = fileSize; }
}

static void onInit(void *userdata, struct fuse_conn_info *conn) { conn->max_read = 1 << 20; }

static void onLookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    if (parent != FUSE_ROOT_ID || strcmp(name, "f") != 0) { fuse_reply_err(req, ENOENT); return; }
    struct fuse_entry_param entry = { .ino = fileIno, .attr_timeout = 3600, .entry_timeout = 3600 };
    fillAttributes(fileIno, &entry.attr);
    fuse_reply_entry(req, &entry);
}

static void onGetattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    struct stat st;
    fillAttributes(ino, &st);
    fuse_reply_attr(req, &st, 3600);
}

static void onOpen(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
    atomic_store(&opened, 1);
}

static void onRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info *fi) {
    if ((uint64_t)offset >= fileSize) { fuse_reply_buf(req, NULL, 0); return; }
    if (offset + size > fileSize) size = fileSize - offset;
    uint64_t at = (uint64_t)offset % ringSize;
    if (at + size > ringSize) at = 0;
    if (mode != store)
        for (size_t i = 0; i < size; i += sizeof record)
            streamingCopy(ring + at + i, record, size - i < sizeof record ? size - i : sizeof record);
    atomic_fetch_add(&reads, 1);
    atomic_fetch_add(&readBytes, size);
    uint64_t end = offset + size, known = atomic_load(&readerAt);
    while (end > known && !atomic_compare_exchange_weak(&readerAt, &known, end)) {}
    pthread_mutex_lock(&lock);
    pthread_cond_broadcast(&readerMoved);
    pthread_mutex_unlock(&lock);
    fuse_reply_buf(req, ring + at, size);
}

static void *dropBehind(void *unused) {
    uint64_t dropped = keepHead;
    while (!atomic_load(&stopping)) {
        uint64_t reader = atomic_load(&readerAt);
        if (reader > keepBehind && reader - keepBehind >= dropped + dropStep) {
            uint64_t upTo = (reader - keepBehind) / dropStep * dropStep;
            fuse_lowlevel_notify_inval_inode(session, fileIno, dropped, upTo - dropped);
            dropped = upTo;
        } else {
            waitForReader();
        }
    }
    return NULL;
}

static void *storeAheadOfReader(void *unused) {
    while (!atomic_load(&opened)) waitForReader();   // the kernel must know the inode first
    for (uint64_t next = 0; next < fileSize && !atomic_load(&stopping);) {
        if (next >= atomic_load(&readerAt) + storeAhead) { waitForReader(); continue; }
        for (size_t i = 0; i < storeChunk; i += sizeof record) memcpy(gathered + i, record, sizeof record);
        size_t count = (next + storeChunk) % dropStep == 0 ? storeChunk - 4096 : storeChunk;
        struct fuse_bufvec bytes = FUSE_BUFVEC_INIT(count);
        bytes.buf[0].mem = gathered;
        int error = fuse_lowlevel_notify_store(session, fileIno, next, &bytes, 0);
        if (error) fprintf(stderr, "store at %llu: %s\n", (unsigned long long)next, strerror(-error));
        atomic_fetch_add(&stores, 1);
        next += storeChunk;
    }
    return NULL;
}

static const struct fuse_lowlevel_ops operations = {
    .init = onInit, .lookup = onLookup, .getattr = onGetattr, .open = onOpen, .read = onRead,
};

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s MOUNTPOINT reply|store|reply-keep\n", argv[0]); return 64; }
    if (!strcmp(argv[2], "reply")) mode = reply;
    else if (!strcmp(argv[2], "store")) mode = store;
    else if (!strcmp(argv[2], "reply-keep")) mode = replyKeep;
    else { fprintf(stderr, "%s: unknown mode %s\n", argv[0], argv[2]); return 64; }
    ring = aligned_alloc(2 * MiB, ringSize);
    memset(ring, 'x', ringSize);
    memset(record, 'y', sizeof record);
    char *fuseArgv[] = { argv[0], "-o", "max_read=1048576", NULL };
    struct fuse_args args = FUSE_ARGS_INIT(3, fuseArgv);
    session = fuse_session_new(&args, &operations, sizeof operations, NULL);
    if (!session || fuse_session_mount(session, argv[1]) != 0) { fprintf(stderr, "%s: cannot mount %s\n", argv[0], argv[1]); return 1; }
    pthread_t dropper, storer;
    if (mode != replyKeep) pthread_create(&dropper, NULL, dropBehind, NULL);
    if (mode == store) pthread_create(&storer, NULL, storeAheadOfReader, NULL);
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(config, 4);
    fuse_session_loop_mt(session, config);
    atomic_store(&stopping, 1);
    fprintf(stderr, "reads %llu (%llu MiB), stores %llu\n", (unsigned long long)reads,
            (unsigned long long)(readBytes >> 20), (unsigned long long)stores);
    fuse_session_unmount(session);
    fuse_session_destroy(session);
    return 0;
}
