/* The ABI is a header; this file only lets SwiftPM build the target and
 * checks at compile time that the tables keep their documented layout. */
#include "authbridge/plugin.h"

_Static_assert(offsetof(ab_host_api, size) == 0, "size must be the first field");
_Static_assert(offsetof(ab_plugin_vtable, size) == 0, "size must be the first field");
_Static_assert(offsetof(ab_plugin_info, magic) == 0, "magic must be the first field");
