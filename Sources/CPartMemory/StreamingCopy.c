// Why not memcpy: a read-ahead part is filled 16 KiB at a time (one TLS record per callback) and
// read back only when the reader reaches it, 64 MiB or more later, long after it has left the
// CPU's caches. An ordinary store first reads each destination line into the cache and then writes
// it back; a streaming (non-temporal) store writes the line to memory directly, which halves the
// memory traffic of the copy and leaves the caches to the TLS and socket work beside it.
// glibc's memcpy streams only copies of several MiB, never a 16 KiB one.
//
// Streaming stores are weakly ordered: the SFENCE at the end makes them visible before any later
// store, such as the part's count of filled bytes that tells a reader the bytes are there.

#include "PartMemory.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <emmintrin.h>

void dbx_streaming_copy(void *destination, const void *source, size_t count) {
    unsigned char *to = destination;
    const unsigned char *from = source;
    size_t head = (16 - ((uintptr_t)to & 15)) & 15;
    if (head > count) head = count;
    memcpy(to, from, head);
    to += head;
    from += head;
    count -= head;
    for (; count >= 64; count -= 64, to += 64, from += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)from);
        __m128i b = _mm_loadu_si128((const __m128i *)(from + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(from + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(from + 48));
        _mm_stream_si128((__m128i *)to, a);
        _mm_stream_si128((__m128i *)(to + 16), b);
        _mm_stream_si128((__m128i *)(to + 32), c);
        _mm_stream_si128((__m128i *)(to + 48), d);
    }
    memcpy(to, from, count);
    _mm_sfence();
}

#else

void dbx_streaming_copy(void *destination, const void *source, size_t count) {
    memcpy(destination, source, count);
}

#endif
