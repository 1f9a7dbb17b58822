// The system libgd (Debian: libgd-dev), imported as the module CGD. Only the Dropbox emulator uses
// it, to make thumbnails of the served images the way Dropbox does (files/get_thumbnail_batch,
// files/get_thumbnail_v2). No wrappers: every function the emulator calls is importable.
#include <gd.h>
