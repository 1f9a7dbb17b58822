// The system SQLite (Debian: libsqlite3-dev), imported as the module CSQLite. Only MetadataCache
// uses it. No wrappers: everything MetadataCache calls is importable except the SQLITE_TRANSIENT
// macro, which MetadataCache spells in Swift.
#include <sqlite3.h>
