#ifndef AUTHBRIDGE_PROCESS_H
#define AUTHBRIDGE_PROCESS_H

#include <sys/types.h>

/* What the authbridge executable does first, and how it starts plugin runners: in C because
   Swift cannot call prctl(2) (a variadic function) and posix_spawn's attributes are clumsy in it. */

/* No core dumps (RLIMIT_CORE 0) and not dumpable (PR_SET_DUMPABLE 0: no core
   file, no ptrace attach or /proc/<pid>/mem access by this user's other
   processes): the vault key and tokens live in this process's memory.
   Returns 0, or the errno of the step that failed. */
int ab_process_harden(void);

/* Removes the variable `name` from the environment and returns a malloc'ed
   copy of its value (NULL when unset): later children never inherit it. The
   original bytes, which /proc/<pid>/environ keeps showing after unsetenv,
   are overwritten with zeros. */
char *ab_process_take_variable(const char *name);

/* Starts a plugin runner (`authbridge plugin-runner`) with posix_spawn: stdin from /dev/null,
   stdout onto stderr (fd 1 is never the protocol stream), `channel` as fd 3 and `library` as
   fd 4, every other descriptor closed; in a process group of its own (so that the host can
   kill what the plugin forks) with an empty signal mask and SIGINT, SIGTERM, SIGHUP and SIGCHLD
   at their defaults. `channel` and `library` must be above 4, so that placing one cannot
   overwrite the other. Returns 0 and the child's pid, or an errno. */
int ab_spawn_runner(const char *path, char *const argv[], char *const envp[], int channel, int library, pid_t *pid);

/* In a runner: SIGKILL when the thread that spawned it ends (PR_SET_PDEATHSIG; the host spawns
   from a thread that never ends), and _exit(70) at once when the parent is no longer `parent`
   (it died before the signal was armed). Returns 0 or the errno of prctl. */
int ab_process_die_with_parent(pid_t parent);

/* What `ab_runner_confine` did, part by part: 0 when the part is in force, else the errno that
   kept it out (ENOSYS or EOPNOTSUPP: this kernel lacks it; EBUSY: the process had threads). */
typedef struct {
    /* A user and a PID namespace held by a process of the runner's: what the plugin starts is
       killed when the runner ends, whatever session or process group it moved to. */
    int namespaces;
    /* PR_SET_NO_NEW_PRIVS, and no capabilities. */
    int no_new_privs;
    /* Landlock: the files the plugin can open; from its ABI 4 no TCP, from 6 no signal or
       abstract socket outside. `landlock_abi` is the ABI in force (0: none). */
    int landlock;
    int landlock_abi;
    /* The seccomp filter: no socket, ptrace, exec, setsid, namespace, keyring, io_uring… */
    int seccomp;
} ab_confinement;

/* In a runner, before the plugin is loaded and while the process has one thread: confines it
   (sandbox.c says how, bridge-spec/README.md "Isolation" what for). `library_fd` is the plugin's
   library, which stays readable. Every part is tried whatever became of the others. With a PID
   namespace it returns in a child, the runner proper (pid 2 of the namespace), while the process
   the host started waits for it and ends as it ends (the same exit status or signal). */
void ab_runner_confine(int library_fd, ab_confinement *confinement);

/* Notes what this process was given when it started, before anything else runs: its open
   descriptors above 2, its signal mask, and which of the signals `ab_process_run_command`
   forwards (and SIGPIPE) were ignored. A command started later gets exactly these. */
void ab_process_note_start(void);

/* Runs a command for `authbridge exec` and waits for it: `file` is looked up on PATH
   (posix_spawnp), `envp` is its whole environment, stdin, stdout and stderr are this process's.
   The child gets the descriptors, signal mask and ignored signals this process started with
   (`ab_process_note_start`), nothing opened since. While it runs, SIGINT, SIGTERM, SIGHUP,
   SIGQUIT, SIGUSR1 and SIGUSR2 sent to this process by another process are sent on to the
   child; those the terminal sends (Ctrl-C: to the whole foreground process group, the child
   included) are not sent twice. Returns 0 and the child's wait status in `wait_status`, or the
   errno of posix_spawnp (ENOENT: no such command). */
int ab_process_run_command(const char *file, char *const argv[], char *const envp[], int *wait_status);

/* For a long-lived process that serves many connections (`authbridge agent`): blocks of 128 KiB
   and more — a connection's read buffer, an unfinished frame — are mapped on their own and
   unmapped when freed, so their memory goes back to the system when a connection ends. glibc's
   default raises this threshold after the first such free (up to 32 MiB), after which they come
   from arenas that keep their pages. Returns 0, or -1 if glibc refused. */
int ab_process_return_freed_blocks(void);

/* For the same process: its threads (two per connection, the cooperative pool, plugins') share
   at most `count` malloc arenas. glibc's default, eight per core, spreads a burst of requests over
   as many arenas as threads, each keeping its own free pages between bursts (issue 32: over
   1,000,000 mixed requests the agent grew 3.0 MiB with 15 arenas, 1.8 MiB with 2; its peak went
   from 43 to 38 MiB; bench/README, "The agent's memory"). Returns 0, or -1 if glibc refused. */
int ab_process_limit_arenas(int count);

/* For the same process: gives back to the system the pages of what was freed, when glibc's arenas
   hold `threshold` bytes or more of free memory and something was allocated or freed since the
   last call that gave pages back (glibc returns only the top of an arena by itself: a burst of
   requests — tens of MiB of task frames and answers, over as many arenas as threads — stays
   resident after it is over, issue 32). malloc_trim(0) walks every arena and releases each free
   page inside it. Returns 1 if pages were given back, else 0 (also without glibc 2.33's
   mallinfo2). Not thread-safe: one caller (the agent's trimming thread). */
int ab_process_trim_freed_memory(size_t threshold);

#endif
