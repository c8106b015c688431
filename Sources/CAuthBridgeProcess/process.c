#define _GNU_SOURCE
#include "authbridge_process.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
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

/* Both of a spawn's objects ready (0), or neither (an error number). */
static int spawn_objects_init(posix_spawn_file_actions_t *actions, posix_spawnattr_t *attributes)
{
    int status = posix_spawn_file_actions_init(actions);
    if (status != 0)
        return status;
    status = posix_spawnattr_init(attributes);
    if (status != 0)
        posix_spawn_file_actions_destroy(actions);
    return status;
}

int ab_spawn_runner(const char *path, char *const argv[], char *const envp[], int channel, int library, pid_t *pid)
{
    if (channel <= 4 || library <= 4)
        return EINVAL;
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int status = spawn_objects_init(&actions, &attributes);
    if (status != 0)
        return status;
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

/* ── authbridge exec ───────────────────────────────────────────────────────────────────────── */

#define AB_MAX_INHERITED 256

static const int forwarded_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
#define AB_FORWARDED (sizeof forwarded_signals / sizeof forwarded_signals[0])

static int inherited_fds[AB_MAX_INHERITED];
static int inherited_count = -1; /* -1: not noted (then every descriptor above 2 is kept) */
static sigset_t start_mask;
static int ignored_at_start[AB_FORWARDED];
static int sigpipe_ignored_at_start;
static volatile pid_t running_child;
/* A signal to forward that came before the child's pid was known (0: none). */
static volatile sig_atomic_t early_signal;

static int was_ignored(int number)
{
    struct sigaction current;
    return sigaction(number, NULL, &current) == 0 && current.sa_handler == SIG_IGN;
}

void ab_process_note_start(void)
{
    sigprocmask(SIG_SETMASK, NULL, &start_mask);
    for (size_t i = 0; i < AB_FORWARDED; i++)
        ignored_at_start[i] = was_ignored(forwarded_signals[i]);
    sigpipe_ignored_at_start = was_ignored(SIGPIPE);
    /* Descriptors 3…1023 are probed one by one (no /proc needed, nothing is opened to look). */
    inherited_count = 0;
    for (int fd = 3; fd < 1024 && inherited_count < AB_MAX_INHERITED; fd++) {
        if (fcntl(fd, F_GETFD) != -1)
            inherited_fds[inherited_count++] = fd;
    }
}

static int is_inherited(int fd)
{
    if (inherited_count < 0)
        return 1;
    for (int i = 0; i < inherited_count; i++) {
        if (inherited_fds[i] == fd)
            return 1;
    }
    return 0;
}

/* Sends a signal on to the child unless the kernel sent it (the terminal's Ctrl-C and Ctrl-\
   reach the whole foreground process group, the child included) or the child sent it itself. */
static void forward_signal(int number, siginfo_t *info, void *context)
{
    (void)context;
    pid_t child = running_child;
    if (info->si_code > 0 || (child > 0 && info->si_pid == child))
        return;
    if (child <= 0) {
        early_signal = number;
        return;
    }
    int saved = errno;
    kill(child, number);
    errno = saved;
}

/* Adds a close action for every descriptor above 2 this process has and did not start with
   (vault locks, sockets, pipes of the runtime): they are none of the command's business. */
static int close_what_was_opened(posix_spawn_file_actions_t *actions)
{
    if (inherited_count < 0)
        return 0;
    DIR *folder = opendir("/proc/self/fd");
    if (folder == NULL)
        return errno;
    int own = dirfd(folder);
    int status = 0;
    struct dirent *entry;
    while (status == 0 && (entry = readdir(folder)) != NULL) {
        char *end;
        long fd = strtol(entry->d_name, &end, 10);
        if (*end != '\0' || end == entry->d_name || fd <= 2 || fd == own || is_inherited((int)fd))
            continue;
        status = posix_spawn_file_actions_addclose(actions, (int)fd);
    }
    closedir(folder);
    return status;
}

int ab_process_run_command(const char *file, char *const argv[], char *const envp[], int *wait_status)
{
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int status = spawn_objects_init(&actions, &attributes);
    if (status != 0)
        return status;
    status = close_what_was_opened(&actions);
    /* The signals this process ignores now but did not at start (SIGPIPE…) are the command's
       defaults again; the forwarded ones are caught below, and exec makes caught ones default. */
    sigset_t defaults;
    sigemptyset(&defaults);
    if (!sigpipe_ignored_at_start)
        sigaddset(&defaults, SIGPIPE);
    if (status == 0)
        status = posix_spawnattr_setsigmask(&attributes, &start_mask);
    if (status == 0)
        status = posix_spawnattr_setsigdefault(&attributes, &defaults);
    if (status == 0)
        status = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

    /* Ignored at start (nohup): ignored by the command too. Otherwise caught and forwarded. */
    struct sigaction forward, ignore;
    memset(&forward, 0, sizeof forward);
    memset(&ignore, 0, sizeof ignore);
    forward.sa_sigaction = forward_signal;
    forward.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&forward.sa_mask);
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    if (status == 0) {
        for (size_t i = 0; i < AB_FORWARDED; i++)
            sigaction(forwarded_signals[i], ignored_at_start[i] ? &ignore : &forward, NULL);
    }

    pid_t child = 0;
    if (status == 0)
        status = posix_spawnp(&child, file, &actions, &attributes, argv, envp);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    if (status != 0)
        return status;
    running_child = child;
    int early = early_signal;
    if (early != 0) {
        early_signal = 0;
        kill(child, early);
    }
    int result;
    do {
        result = waitpid(child, wait_status, 0);
    } while (result < 0 && errno == EINTR);
    running_child = 0;
    return result == child ? 0 : errno;
}

int ab_process_return_freed_blocks(void)
{
    return mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 1 ? 0 : -1;
}

int ab_process_limit_arenas(int count)
{
    return mallopt(M_ARENA_MAX, count) == 1 ? 0 : -1;
}

int ab_process_trim_freed_memory(size_t threshold)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    /* The figures of the last trim: equal ones mean nothing was allocated or freed since. One caller. */
    static size_t last_free = 0, last_used = 0;
    struct mallinfo2 info = mallinfo2();
    if (info.fordblks < threshold || (info.fordblks == last_free && info.uordblks == last_used))
        return 0;
    last_free = info.fordblks;
    last_used = info.uordblks;
    return malloc_trim(0);
#else
    (void)threshold;
    return 0;
#endif
}
