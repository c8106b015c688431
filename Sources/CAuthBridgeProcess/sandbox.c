/* The plugin runner's sandbox: what `authbridge plugin-runner` does to itself before it loads a
   plugin it does not trust (bridge-spec/README.md, Isolation). Each part is applied on its own and
   reported on its own, so that a kernel that lacks one leaves the others in force. */
#define _GNU_SOURCE
#include "authbridge_process.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

/* ── Namespaces: the plugin's children die with the runner ─────────────────────────────────── */

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    ssize_t length = (ssize_t)strlen(text);
    int status = write(fd, text, (size_t)length) == length ? 0 : (errno != 0 ? errno : EIO);
    close(fd);
    return status;
}

/* This user as itself in a user namespace of its own (the namespace a PID namespace needs when
   the user is not root). /proc/self/uid_map belongs to root while the process is not dumpable
   (proc(5)), so it is dumpable for the three writes: no plugin code has run yet. */
static int map_own_user(uid_t uid, gid_t gid)
{
    char line[64];
    if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0)
        return errno;
    int status = write_file("/proc/self/setgroups", "deny");
    if (status == ENOENT) /* before Linux 3.19 */
        status = 0;
    if (status == 0) {
        snprintf(line, sizeof line, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
        status = write_file("/proc/self/uid_map", line);
    }
    if (status == 0) {
        snprintf(line, sizeof line, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
        status = write_file("/proc/self/gid_map", line);
    }
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 && status == 0)
        status = errno;
    return status;
}

/* The PID namespace's first process (its pid 1): it holds the namespace and does nothing else
   until every other copy of `peer`'s end is closed, which happens when the process that forked it
   ends, however it ends (the runner proper closed its copy at once). Then it exits, and the
   kernel kills every process left in the namespace (pid_namespaces(7)), whatever session or
   process group they moved to. Orphans it inherits are reaped by the kernel (SIGCHLD ignored). */
__attribute__((noreturn)) static void hold_namespace(int peer)
{
    struct sigaction ignore;
    memset(&ignore, 0, sizeof ignore);
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGCHLD, &ignore, NULL);
    /* Nothing of the runner's: its channel, its library, its standard streams. */
    for (int fd = 0; fd < peer; fd++)
        close(fd);
    if (close_range((unsigned)peer + 1, ~0U, 0) != 0) {
        for (int fd = peer + 1; fd < 1024; fd++)
            close(fd);
    }
    struct pollfd end = { peer, POLLIN, 0 };
    char byte;
    for (;;) {
        int ready = poll(&end, 1, -1);
        if (ready < 0 && errno != EINTR)
            _exit(72);
        if (ready > 0 && ((end.revents & (POLLHUP | POLLERR)) != 0 || read(peer, &byte, 1) <= 0))
            _exit(0);
    }
}

/* In the process the host started, once the runner proper runs: waits for it, ends the
   namespace (its holder, and with it whatever the plugin left there) and reaps both, then ends as
   the runner ended, with its exit status or by its signal: the host sees the runner's own end,
   and nothing of it is left once the host has reaped this process. It keeps its copy of the
   channel (fd 3) until then, since the host kills a runner whose channel ends, and `peer`, its
   end of the holder's socket pair, since the holder ends when every copy of it is closed. */
__attribute__((noreturn)) static void end_as(pid_t runner, pid_t holder, int peer)
{
    for (int fd = 4; fd < peer; fd++)
        close(fd);
    if (close_range((unsigned)peer + 1, ~0U, 0) != 0) {
        for (int fd = peer + 1; fd < 1024; fd++)
            close(fd);
    }
    int status = 0;
    while (waitpid(runner, &status, 0) < 0) {
        if (errno != EINTR)
            _exit(70);
    }
    kill(holder, SIGKILL);
    while (waitpid(holder, NULL, 0) < 0 && errno == EINTR) {}
    if (WIFSIGNALED(status)) {
        int number = WTERMSIG(status);
        struct sigaction fallback;
        memset(&fallback, 0, sizeof fallback);
        fallback.sa_handler = SIG_DFL;
        sigaction(number, &fallback, NULL);
        sigset_t only;
        sigemptyset(&only);
        sigaddset(&only, number);
        sigprocmask(SIG_UNBLOCK, &only, NULL);
        kill(getpid(), number);
        _exit(128 + number);
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 70);
}

/* A user namespace (what a PID namespace needs when the user is not root), then the PID
   namespace the plugin's processes are born in. The user namespace first: a system that lets it
   be made but gives it no rights (an LSM's policy) refuses the PID namespace before anything
   changed. Once it is made, this process can start no thread (clone(2): CLONE_THREAD is EINVAL
   when the PID namespace for children is not one's own), so it forks twice: the namespace's
   holder (its pid 1), then the runner proper, which returns from here; this process stays
   outside, waits for it and ends as it ended. Returns 0 in the runner, or an errno in this
   process when no PID namespace was made. */
static int enter_namespaces(void)
{
    uid_t uid = geteuid();
    gid_t gid = getegid();
    if (unshare(CLONE_NEWUSER) != 0)
        return errno;
    int status = map_own_user(uid, gid);
    if (status != 0)
        return status;
    if (unshare(CLONE_NEWPID) != 0)
        return errno;
    /* From here there is no way back to a process that can run the plugin's threads. */
    int pair[2] = { -1, -1 };
    pid_t holder = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0 ? fork() : -1;
    if (holder == 0) {
        close(pair[0]);
        hold_namespace(pair[1]);
    }
    pid_t runner = holder > 0 ? fork() : -1;
    if (runner < 0) {
        fprintf(stderr, "plugin runner: cannot start its PID namespace (%s)\n", strerror(errno));
        _exit(71);
    }
    close(pair[1]);
    if (runner > 0)
        end_as(runner, holder, pair[0]);
    close(pair[0]);
    return 0;
}

/* ── Landlock: the files the plugin may read ───────────────────────────────────────────────── */

/* What Linux's uapi header adds after 6.1 (Debian 12's), by the ABI that brought it. */
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14) /* ABI 3 */
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */
#endif
#ifndef LANDLOCK_ACCESS_NET_BIND_TCP
#define LANDLOCK_ACCESS_NET_BIND_TCP (1ULL << 0) /* ABI 4 */
#define LANDLOCK_ACCESS_NET_CONNECT_TCP (1ULL << 1)
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0) /* ABI 6 */
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#endif

/* struct landlock_ruleset_attr as of ABI 6; an older kernel reads the members it knows (the
   others are zero when it does not know them, as it requires). */
struct ab_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

#define AB_FS_READ (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)

/* Every filesystem right the kernel of `abi` knows: all are handled, so all are denied but
   those a rule below grants. */
static uint64_t handled_fs(int abi)
{
    uint64_t rights = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1; /* ABI 1: EXECUTE … MAKE_SYM */
    if (abi >= 2)
        rights |= LANDLOCK_ACCESS_FS_REFER;
    if (abi >= 3)
        rights |= LANDLOCK_ACCESS_FS_TRUNCATE;
    if (abi >= 5)
        rights |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
    return rights;
}

/* Grants `rights` beneath `path` (a folder) or on it (a file); a path that does not exist is
   no error. Rights a file cannot have are kept for folders only. */
static int allow_path(int ruleset, const char *path, uint64_t rights)
{
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == ENOTDIR || errno == EACCES ? 0 : errno;
    struct stat info;
    if (fstat(fd, &info) == 0 && !S_ISDIR(info.st_mode))
        rights &= LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_TRUNCATE;
    struct landlock_path_beneath_attr beneath = { .allowed_access = rights, .parent_fd = fd };
    int status = syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &beneath, 0) == 0 ? 0 : errno;
    close(fd);
    return status;
}

/* True when `folder` is `path` or one of the folders above it. */
static int contains(const char *folder, const char *path)
{
    size_t length = strlen(folder);
    while (length > 1 && folder[length - 1] == '/')
        length--;
    if (length == 1 && folder[0] == '/')
        return 1;
    return strncmp(folder, path, length) == 0 && (path[length] == '\0' || path[length] == '/');
}

/* True when `folder` holds one of the user's own folders: home, data (the vault, its key file),
   configuration, runtime (the agent's socket). Both sides as the kernel resolves them (`..`,
   symbolic links), which is what a rule would grant. */
static int holds_user_folders(const char *folder)
{
    static const char *const names[] = { "HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR" };
    char resolved[PATH_MAX], user[PATH_MAX];
    if (realpath(folder, resolved) == NULL)
        return 0; /* nothing there to grant */
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *path = getenv(names[i]);
        if (path != NULL && path[0] == '/' &&
            (contains(resolved, path) || (realpath(path, user) != NULL && contains(resolved, user))))
            return 1;
    }
    return 0;
}

struct library_folders {
    int ruleset;
    int status;
};

/* The folder of every library loaded now (the Swift runtime's, libjansson's…), readable: a
   plugin needs the same runtime and may need more of its libraries. Never a folder that holds
   the user's own (a library loaded from $HOME itself would open all of it). */
static int allow_library_folder(struct dl_phdr_info *info, size_t size, void *context)
{
    (void)size;
    struct library_folders *folders = context;
    const char *name = info->dlpi_name;
    const char *slash = name != NULL ? strrchr(name, '/') : NULL;
    if (slash == NULL || slash == name || folders->status != 0)
        return 0;
    char folder[4096];
    size_t length = (size_t)(slash - name);
    if (length >= sizeof folder)
        return 0;
    memcpy(folder, name, length);
    folder[length] = '\0';
    if (!holds_user_folders(folder))
        folders->status = allow_path(folders->ruleset, folder, AB_FS_READ);
    return 0;
}

/* Landlock (landlock(7)): the filesystem read-only where the system's libraries, locales and
   time zones are (but never a folder that holds the user's own), and the plugin's own library
   (`library_fd`: dlopen reopens it through /proc/self/fd); nothing else opens, nothing can be
   written but /dev/null, nothing executed. From ABI 4 no TCP bind or connect; from ABI 6 no
   signal to a process outside the sandbox and no abstract Unix socket. Returns 0 and the ABI
   enforced in `abi`, or an errno (ENOSYS, EOPNOTSUPP: the kernel has no Landlock enabled). */
static int restrict_files(int library_fd, int *abi)
{
    static const char *const read_only[] = {
        "/usr",
        "/lib",
        "/lib64",
        "/lib32",
        "/etc/ld.so.cache",
        "/etc/ld.so.conf",
        "/etc/ld.so.conf.d",
        "/etc/localtime",
        "/etc/timezone",
        "/etc/nsswitch.conf",
        "/etc/passwd",
        "/etc/group",
        "/proc/self",
        "/sys/devices/system/cpu",
        "/dev/urandom",
        "/dev/random",
        "/dev/zero",
    };
    int version = (int)syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (version < 1)
        return errno;
    struct ab_ruleset_attr attributes = { .handled_access_fs = handled_fs(version) };
    if (version >= 4)
        attributes.handled_access_net = LANDLOCK_ACCESS_NET_BIND_TCP | LANDLOCK_ACCESS_NET_CONNECT_TCP;
    if (version >= 6)
        attributes.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL;
    int ruleset = (int)syscall(SYS_landlock_create_ruleset, &attributes, sizeof attributes, 0);
    if (ruleset < 0)
        return errno;
    int status = 0;
    for (size_t i = 0; status == 0 && i < sizeof read_only / sizeof read_only[0]; i++) {
        if (!holds_user_folders(read_only[i]))
            status = allow_path(ruleset, read_only[i], AB_FS_READ);
    }
    if (status == 0)
        status = allow_path(ruleset, "/dev/null", AB_FS_READ | LANDLOCK_ACCESS_FS_WRITE_FILE);
    if (status == 0) {
        struct library_folders folders = { ruleset, 0 };
        dl_iterate_phdr(allow_library_folder, &folders);
        status = folders.status;
    }
    if (status == 0) {
        struct landlock_path_beneath_attr library = { .allowed_access = LANDLOCK_ACCESS_FS_READ_FILE,
                                                      .parent_fd = library_fd };
        if (syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &library, 0) != 0)
            status = errno;
    }
    if (status == 0 && syscall(SYS_landlock_restrict_self, ruleset, 0) != 0)
        status = errno;
    close(ruleset);
    if (status == 0)
        *abi = version;
    return status;
}

/* ── seccomp: the system calls the plugin may not make ─────────────────────────────────────── */

#if defined(__x86_64__)
#define AB_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define AB_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

#define AB_NEW_NAMESPACES \
    (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET)

/* Refused with EPERM: a socket of any kind (the plugin reaches the network through the host's
   `http`; its channel is the socket it was given), other processes' memory and keys, leaving
   the runner's session or process group, new programs, namespaces, mounts, and what no plugin
   has any use for (kernel modules, BPF, perf, io_uring, which would carry out what seccomp
   refuses). Everything else is allowed: a C or Swift runtime needs threads, memory, files,
   time and signals. */
static const int refused_calls[] = {
    SYS_socket,
    SYS_connect,
    SYS_bind,
    SYS_listen,
    SYS_accept,
    SYS_accept4,
    SYS_ptrace,
    SYS_process_vm_readv,
    SYS_process_vm_writev,
    SYS_kcmp,
#ifdef SYS_pidfd_getfd
    SYS_pidfd_getfd,
#endif
#ifdef SYS_process_madvise
    SYS_process_madvise,
#endif
    SYS_keyctl,
    SYS_add_key,
    SYS_request_key,
    SYS_setsid,
    SYS_setpgid,
    SYS_execve,
    SYS_execveat,
    SYS_unshare,
    SYS_setns,
    SYS_mount,
    SYS_umount2,
    SYS_pivot_root,
    SYS_chroot,
#ifdef SYS_open_tree
    SYS_open_tree,
    SYS_move_mount,
    SYS_fsopen,
    SYS_fsconfig,
    SYS_fsmount,
    SYS_fspick,
#endif
#ifdef SYS_mount_setattr
    SYS_mount_setattr,
#endif
    SYS_name_to_handle_at,
    SYS_open_by_handle_at,
    SYS_fanotify_init,
#ifdef SYS_io_uring_setup
    SYS_io_uring_setup,
    SYS_io_uring_enter,
    SYS_io_uring_register,
#endif
    SYS_bpf,
    SYS_perf_event_open,
    SYS_userfaultfd,
    SYS_init_module,
    SYS_finit_module,
    SYS_delete_module,
    SYS_kexec_load,
#ifdef SYS_kexec_file_load
    SYS_kexec_file_load,
#endif
    SYS_reboot,
    SYS_swapon,
    SYS_swapoff,
    SYS_acct,
    SYS_syslog,
    SYS_quotactl,
#ifdef SYS_iopl
    SYS_iopl,
    SYS_ioperm,
#endif
};

#define AB_REFUSED (sizeof refused_calls / sizeof refused_calls[0])
#define AB_ARG_LOW(n) ((uint32_t)offsetof(struct seccomp_data, args[n])) /* little-endian: the low half */

/* A classic BPF program (seccomp(2)): another architecture's calls (int 0x80 on x86-64) kill the
   process; x32 calls, clone3 (whose flags BPF cannot read: glibc falls back to clone) and the
   refused calls fail; clone with a namespace flag and the terminal ioctls that type into the
   user's shell (TIOCSTI, TIOCLINUX: stdout is the host's stderr, maybe a terminal) fail. */
static int install_filter(void)
{
#ifndef AB_AUDIT_ARCH
    return ENOSYS;
#else
    struct sock_filter program[8 + 2 * AB_REFUSED + 16];
    size_t n = 0;
#define AB_ADD(code, k, jt, jf) program[n++] = (struct sock_filter)BPF_JUMP(code, k, jt, jf)
#define AB_RET(value) AB_ADD(BPF_RET | BPF_K, value, 0, 0)
#define AB_ERRNO(error) (SECCOMP_RET_ERRNO | ((error)&SECCOMP_RET_DATA))
    AB_ADD(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch), 0, 0);
    AB_ADD(BPF_JMP | BPF_JEQ | BPF_K, AB_AUDIT_ARCH, 1, 0);
    AB_RET(SECCOMP_RET_KILL_PROCESS);
    AB_ADD(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr), 0, 0);
#ifdef __x86_64__
    AB_ADD(BPF_JMP | BPF_JGE | BPF_K, 0x40000000 /* __X32_SYSCALL_BIT */, 0, 1);
    AB_RET(AB_ERRNO(ENOSYS));
#endif
    for (size_t i = 0; i < AB_REFUSED; i++) {
        AB_ADD(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)refused_calls[i], 0, 1);
        AB_RET(AB_ERRNO(EPERM));
    }
    AB_ADD(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1);
    AB_RET(AB_ERRNO(ENOSYS));
    /* clone: its flags are the first argument (the kernel reads them whole; the namespace flags
       are all in the low half). */
    AB_ADD(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 3);
    AB_ADD(BPF_LD | BPF_W | BPF_ABS, AB_ARG_LOW(0), 0, 0);
    AB_ADD(BPF_JMP | BPF_JSET | BPF_K, AB_NEW_NAMESPACES, 0, 6);
    AB_RET(AB_ERRNO(EPERM));
    /* ioctl: the command is an unsigned int, the low half of the second argument. */
    AB_ADD(BPF_JMP | BPF_JEQ | BPF_K, SYS_ioctl, 0, 4);
    AB_ADD(BPF_LD | BPF_W | BPF_ABS, AB_ARG_LOW(1), 0, 0);
    AB_ADD(BPF_JMP | BPF_JEQ | BPF_K, TIOCSTI, 1, 0);
    AB_ADD(BPF_JMP | BPF_JEQ | BPF_K, TIOCLINUX, 0, 1);
    AB_RET(AB_ERRNO(EPERM));
    AB_RET(SECCOMP_RET_ALLOW);
#undef AB_ADD
#undef AB_RET
#undef AB_ERRNO
    struct sock_fprog filter = { (unsigned short)n, program };
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &filter) != 0)
        return errno;
    return 0;
#endif
}

/* ── All of it ─────────────────────────────────────────────────────────────────────────────── */

/* The process has one thread: namespaces, Landlock and no_new_privs apply to the calling thread
   (and what it starts later), so a thread started before would stay outside. */
static int single_threaded(void)
{
    FILE *status = fopen("/proc/self/status", "re");
    if (status == NULL)
        return errno;
    char line[256];
    int threads = 0;
    while (fgets(line, sizeof line, status) != NULL) {
        if (strncmp(line, "Threads:", 8) == 0) {
            threads = atoi(line + 8);
            break;
        }
    }
    fclose(status);
    return threads == 1 ? 0 : EBUSY;
}

/* Drops every capability (a new user namespace gave the runner all of them, in it). */
static int drop_capabilities(void)
{
    struct {
        uint32_t version;
        int pid;
    } header = { 0x20080522 /* _LINUX_CAPABILITY_VERSION_3 */, 0 };
    struct {
        uint32_t effective, permitted, inheritable;
    } none[2];
    memset(none, 0, sizeof none);
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
        return errno;
    return syscall(SYS_capset, &header, none) == 0 ? 0 : errno;
}

void ab_runner_confine(int library_fd, ab_confinement *confinement)
{
    memset(confinement, 0, sizeof *confinement);
    int threads = single_threaded();
    if (threads != 0) {
        confinement->namespaces = threads;
        confinement->no_new_privs = threads;
        confinement->landlock = threads;
        confinement->seccomp = threads;
        return;
    }
    confinement->namespaces = enter_namespaces();
    confinement->no_new_privs = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 ? drop_capabilities() : errno;
    confinement->landlock = restrict_files(library_fd, &confinement->landlock_abi);
    confinement->seccomp = install_filter();
}
