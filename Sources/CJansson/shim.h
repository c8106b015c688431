#ifndef AUTHBRIDGE_CJANSSON_SHIM_H
#define AUTHBRIDGE_CJANSSON_SHIM_H
#include <jansson.h>

/* jansson's reference counting is done by inline functions and macros that
 * Swift cannot import; these wrappers make them callable. */
static inline json_t *cjansson_incref(json_t *json)
{
    return json_incref(json);
}
static inline void cjansson_decref(json_t *json)
{
    json_decref(json);
}
static inline int cjansson_typeof(const json_t *json)
{
    return (int)json_typeof(json);
}
#endif
