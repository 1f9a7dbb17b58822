// What a read-ahead part's memory needs from C: a copy into it that Swift cannot emit, and a
// move of its pages that Swift cannot call (mremap is variadic).
#ifndef DBX_PART_MEMORY_H
#define DBX_PART_MEMORY_H

#include <stddef.h>

/// Copies `count` bytes from `source` to `destination` (not overlapping) without pulling the
/// destination into the CPU's caches, and returns once the bytes are visible to every other CPU,
/// so a count published after it (under a lock) never runs ahead of them.
void dbx_streaming_copy(void *destination, const void *source, size_t count);

/// Moves the pages mapped at `from` (`length` bytes, page-aligned) to `to`, replacing whatever
/// was mapped there, without copying or zeroing them: `from` is left unmapped. Returns 0, or
/// the errno of mremap(2).
int dbx_move_pages(void *from, size_t length, void *to);

#endif
