#define _GNU_SOURCE
#include "authbridge_process.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

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

int ab_spawn_runner(const char *path, char *const argv[], char *const envp[], int channel, int library, pid_t *pid)
{
    if (channel <= 4 || library <= 4)
        return EINVAL;
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int status = posix_spawn_file_actions_init(&actions);
    if (status != 0)
        return status;
    status = posix_spawnattr_init(&attributes);
    if (status != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return status;
    }
    if (status == 0)
        status = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    if (status == 0)
        status = posix_spawn_file_actions_adddup2(&actions, 2, 1);
    if (status == 0)
        status = posix_spawn_file_actions_adddup2(&actions, channel, 3);
    if (status == 0)
        status = posix_spawn_file_actions_adddup2(&actions, library, 4);
    if (status == 0)
        status = posix_spawn_file_actions_addclosefrom_np(&actions, 5);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGHUP);
    sigaddset(&defaults, SIGCHLD);
    if (status == 0)
        status = posix_spawnattr_setsigmask(&attributes, &none);
    if (status == 0)
        status = posix_spawnattr_setsigdefault(&attributes, &defaults);
    if (status == 0)
        status = posix_spawnattr_setpgroup(&attributes, 0);
    if (status == 0)
        status = posix_spawnattr_setflags(&attributes,
                                          POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    if (status == 0)
        status = posix_spawn(pid, path, &actions, &attributes, argv, envp);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return status;
}

int ab_process_die_with_parent(pid_t parent)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
        return errno;
    if (getppid() != parent)
        _exit(70);
    return 0;
}
