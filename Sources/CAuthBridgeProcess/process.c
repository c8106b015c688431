#define _GNU_SOURCE
#include "authbridge_process.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>

int ab_process_harden(void)
{
    struct rlimit none = { 0, 0 };
    if (setrlimit(RLIMIT_CORE, &none) != 0)
        return errno;
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
        return errno;
    return 0;
}

char *ab_process_take_variable(const char *name)
{
    char *value = getenv(name);
    if (value == NULL)
        return NULL;
    char *copy = strdup(value);
    /* getenv points into the "NAME=value" string: its start is the name's length + 1 before. */
    char *entry = value - strlen(name) - 1;
    size_t length = strlen(entry);
    unsetenv(name);
    memset(entry, 0, length);
    return copy;
}
