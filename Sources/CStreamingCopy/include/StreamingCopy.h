// A copy into memory that is read again only much later, by another thread or the kernel.
#ifndef DBX_STREAMING_COPY_H
#define DBX_STREAMING_COPY_H

#include <stddef.h>

/// Copies `count` bytes from `source` to `destination` (not overlapping) without pulling the
/// destination into the CPU's caches, and returns once the bytes are visible to every other CPU,
/// so a count published after it (under a lock) never runs ahead of them.
void dbx_streaming_copy(void *destination, const void *source, size_t count);

#endif
