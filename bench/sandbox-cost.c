/* What a plugin runner's sandbox costs at start-up (bench/README.md, "Runner sandbox"): each part
   of ab_runner_confine (Sources/CAuthBridgeProcess/sandbox.c, included here for its static
   functions) timed in fresh child processes, since a sandbox cannot be undone; and the seccomp
   filter built with libseccomp instead (Debian's libseccomp.so.2, opened with dlopen, its few
   declarations below: no -dev package needed), the same rules, for the choice sandbox.c made.

     gcc -O2 -o .build/sandbox-cost bench/sandbox-cost.c -ISources/CAuthBridgeProcess/include -ldl
     .build/sandbox-cost [SAMPLES]        (default 200; prints a table, times in microseconds) */
#include "../Sources/CAuthBridgeProcess/sandbox.c"

#include <dlfcn.h>
#include <sys/mman.h>
#include <time.h>

/* libseccomp 2.5's ABI, the part used (seccomp.h). */
typedef void *scmp_filter_ctx;
struct scmp_arg_cmp {
    unsigned int arg;
    int op; /* enum scmp_compare */
    uint64_t datum_a, datum_b;
};
#define SCMP_CMP_MASKED_EQ 7
#define SCMP_ACT_ALLOW 0x7fff0000U
#define SCMP_ACT_ERRNO(x) (0x00050000U | ((x)&0x0000ffffU))
static scmp_filter_ctx (*scmp_init)(uint32_t);
static int (*scmp_rule_add)(scmp_filter_ctx, uint32_t, int, unsigned int, ...);
static int (*scmp_load)(scmp_filter_ctx);
static int (*scmp_export_bpf)(scmp_filter_ctx, int);
static void (*scmp_release)(scmp_filter_ctx);

static int open_libseccomp(void)
{
    void *library = dlopen("libseccomp.so.2", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL)
        return -1;
    scmp_init = (scmp_filter_ctx(*)(uint32_t))dlsym(library, "seccomp_init");
    scmp_rule_add = (int (*)(scmp_filter_ctx, uint32_t, int, unsigned int, ...))dlsym(library, "seccomp_rule_add");
    scmp_load = (int (*)(scmp_filter_ctx))dlsym(library, "seccomp_load");
    scmp_export_bpf = (int (*)(scmp_filter_ctx, int))dlsym(library, "seccomp_export_bpf");
    scmp_release = (void (*)(scmp_filter_ctx))dlsym(library, "seccomp_release");
    return scmp_init && scmp_rule_add && scmp_load && scmp_export_bpf && scmp_release ? 0 : -1;
}

/* sandbox.c's filter, in libseccomp's words. */
static scmp_filter_ctx libseccomp_filter(void)
{
    scmp_filter_ctx filter = scmp_init(SCMP_ACT_ALLOW);
    if (filter == NULL)
        return NULL;
    int status = 0;
    for (size_t i = 0; status == 0 && i < AB_REFUSED; i++)
        status = scmp_rule_add(filter, SCMP_ACT_ERRNO(EPERM), refused_calls[i], 0);
    if (status == 0)
        status = scmp_rule_add(filter, SCMP_ACT_ERRNO(ENOSYS), SYS_clone3, 0);
    static const uint64_t namespaces[] = { CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
                                           CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET };
    for (size_t i = 0; status == 0 && i < sizeof namespaces / sizeof namespaces[0]; i++) {
        struct scmp_arg_cmp flag = { 0, SCMP_CMP_MASKED_EQ, namespaces[i], namespaces[i] };
        status = scmp_rule_add(filter, SCMP_ACT_ERRNO(EPERM), SYS_clone, 1, flag);
    }
    static const uint64_t terminal[] = { TIOCSTI, TIOCLINUX };
    for (size_t i = 0; status == 0 && i < 2; i++) {
        struct scmp_arg_cmp command = { 1, SCMP_CMP_MASKED_EQ, 0xffffffffU, terminal[i] };
        status = scmp_rule_add(filter, SCMP_ACT_ERRNO(EPERM), SYS_ioctl, 1, command);
    }
    if (status != 0) {
        scmp_release(filter);
        return NULL;
    }
    return filter;
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

enum part { FILTER_BY_HAND, FILTER_LIBSECCOMP_OPEN, FILTER_LIBSECCOMP, LANDLOCK, NAMESPACES, WHOLE, PARTS };
static const char *const names[PARTS] = {
    "seccomp filter, hand-written BPF (sandbox.c)",           "seccomp filter, libseccomp (dlopen + rules + load)",
    "seccomp filter, libseccomp already open (rules + load)", "Landlock ruleset (rules + restrict_self)",
    "user + PID namespace, holder and runner forked",         "ab_runner_confine, all of it",
};

/* One sample of `part` in a new child: its time in ns, or -1 when it failed. */
static int64_t sample(enum part part, int library)
{
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0)
        return -1;
    pid_t child = fork();
    if (child == 0) {
        int64_t started = now_ns(), took = -1;
        int status = 0, abi = 0;
        ab_confinement confinement;
        switch (part) {
        case FILTER_BY_HAND:
            prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            status = install_filter();
            break;
        case FILTER_LIBSECCOMP_OPEN:
        case FILTER_LIBSECCOMP: {
            if (part == FILTER_LIBSECCOMP)
                started = now_ns(); /* opened before the fork */
            else
                status = open_libseccomp();
            scmp_filter_ctx filter = status == 0 ? libseccomp_filter() : NULL;
            status = filter != NULL ? scmp_load(filter) : -1;
            break;
        }
        case LANDLOCK:
            prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            status = restrict_files(library, &abi);
            break;
        case NAMESPACES:
            status = enter_namespaces(); /* returns in the runner proper; its parent waits */
            break;
        case WHOLE:
            ab_runner_confine(library, &confinement);
            status = confinement.namespaces | confinement.no_new_privs | confinement.landlock | confinement.seccomp;
            break;
        default: break;
        }
        if (status == 0)
            took = now_ns() - started;
        _exit(write(pipe_fds[1], &took, sizeof took) == sizeof took ? 0 : 1);
    }
    close(pipe_fds[1]);
    int64_t took = -1;
    if (child < 0 || read(pipe_fds[0], &took, sizeof took) != sizeof took)
        took = -1;
    close(pipe_fds[0]);
    while (child > 0 && waitpid(child, NULL, 0) < 0 && errno == EINTR) {}
    return took;
}

static int by_value(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Instructions in libseccomp's program for the same rules (exported as BPF). */
static long libseccomp_instructions(void)
{
    scmp_filter_ctx filter = libseccomp_filter();
    int fd = filter != NULL ? memfd_create("bpf", 0) : -1;
    long size = -1;
    if (fd >= 0 && scmp_export_bpf(filter, fd) == 0)
        size = lseek(fd, 0, SEEK_END) / (long)sizeof(struct sock_filter);
    if (fd >= 0)
        close(fd);
    if (filter != NULL)
        scmp_release(filter);
    return size;
}

int main(int argc, char **argv)
{
    int samples = argc > 1 ? atoi(argv[1]) : 200;
    if (samples < 1 || samples > 100000)
        return 2;
    int library = open("/proc/self/exe", O_RDONLY | O_CLOEXEC); /* stands for a plugin's library */
    if (library < 0)
        return 1;
    int libseccomp = open_libseccomp() == 0;
    if (!libseccomp)
        printf("(libseccomp.so.2 not found: its rows are left out)\n");
    int64_t *times = calloc((size_t)samples, sizeof *times);
    printf("%-56s %10s %10s\n", "part (fresh process per sample, µs)", "p50", "p90");
    for (int part = 0; part < PARTS; part++) {
        if (!libseccomp && (part == FILTER_LIBSECCOMP_OPEN || part == FILTER_LIBSECCOMP))
            continue;
        int failed = 0;
        for (int i = 0; i < samples; i++) {
            times[i] = sample((enum part)part, library);
            failed += times[i] < 0;
        }
        if (failed > 0) {
            printf("%-56s %10s (%d of %d failed)\n", names[part], "-", failed, samples);
            continue;
        }
        qsort(times, (size_t)samples, sizeof *times, by_value);
        printf("%-56s %10.1f %10.1f\n", names[part], times[samples / 2] / 1e3, times[samples * 9 / 10] / 1e3);
    }
    /* The hand-written program's length, counted the way install_filter builds it. */
    long by_hand = 4 + 2 * (long)AB_REFUSED + 2 + 4 + 6;
#ifdef __x86_64__
    by_hand += 2;
#endif
    printf("BPF instructions: hand-written %ld, libseccomp %ld\n", by_hand,
           libseccomp ? libseccomp_instructions() : -1L);
    free(times);
    return 0;
}
