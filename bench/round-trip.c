/*
 * round-trip: sequential request/answer round trips, timed by a C client, for
 * `make bench`.
 *
 * The Python client of bench/hot_path.py spends tens of microseconds of its
 * own per round trip (its floor, measured against the C answerer, is several
 * times the pipe's); this one spends about a microsecond, so what it prints is
 * what the programs add. It starts each program with pipes, says initialize,
 * initialized and the bench's setup sign-in (the session flow of the bench
 * profile; the C answerer answers it like anything else), then sends
 * WARMUP + N getAccessToken requests to each in turn, the next only after the
 * answer; the programs take turns request by request, starting each round with
 * the next one, so that drift hits all alike. It prints one line:
 *
 *   ROUND_TRIP [{"p50":U,"p99":U,"max":U},...]   (microseconds, one per program)
 *
 * and exits 0, or 1 with a message when a program failed or answered an error.
 *
 * ROUND_TRIP_PARAMS (a JSON object, default {"provider":"bench"}) replaces getAccessToken's
 * params, and ROUND_TRIP_SETUP=0 leaves out the setup sign-in (programs whose vault already holds
 * a session: bench/dpop.py).
 *
 * Usage: round-trip N PROGRAM [ARG...] [-- PROGRAM [ARG...]]...
 * Build: gcc -O2 -o round-trip bench/round-trip.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define WARMUP 200
#define MAX_PROGRAMS 4
#define LINE_MAX_BYTES (1 << 16)

typedef struct {
    pid_t pid;
    int to;   /* its stdin */
    int from; /* its stdout */
    char buffer[LINE_MAX_BYTES];
    size_t have;   /* bytes in buffer */
    double *times; /* microseconds, one per timed round trip */
} program;

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "round-trip: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void start(program *p, char **argv)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0)
        fail("pipe", strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    int error = posix_spawnp(&p->pid, argv[0], &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    if (error != 0)
        fail(argv[0], strerror(error));
    close(in[0]);
    close(out[1]);
    p->to = in[1];
    p->from = out[0];
    p->have = 0;
}

static void send_line(program *p, const char *line, size_t length)
{
    while (length > 0) {
        ssize_t n = write(p->to, line, length);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            fail("write", strerror(errno));
        line += n;
        length -= (size_t)n;
    }
}

/* Reads lines until the response whose id is `id` (a JSON token: 7 or "setup");
 * notifications and other lines are skipped. Fails on an error response. */
static void read_answer(program *p, const char *id)
{
    char key[64];
    int key_length = snprintf(key, sizeof key, "\"id\":%s", id);
    for (;;) {
        char *newline = memchr(p->buffer, '\n', p->have);
        while (newline == NULL) {
            if (p->have == sizeof p->buffer)
                fail("answer", "a line over 64 KiB");
            ssize_t n = read(p->from, p->buffer + p->have, sizeof p->buffer - p->have);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                fail("read", n == 0 ? "the program closed its stdout" : strerror(errno));
            p->have += (size_t)n;
            newline = memchr(p->buffer, '\n', p->have);
        }
        *newline = '\0';
        char *hit = strstr(p->buffer, key);
        int mine = hit != NULL && (hit[key_length] == ',' || hit[key_length] == '}');
        if (mine && strstr(p->buffer, "\"result\"") == NULL)
            fail("error answer", p->buffer);
        size_t used = (size_t)(newline - p->buffer) + 1;
        memmove(p->buffer, p->buffer + used, p->have - used);
        p->have -= used;
        if (mine)
            return;
    }
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 3)
        fail("usage", "round-trip N PROGRAM [ARG...] [-- PROGRAM [ARG...]]...");
    long n = strtol(argv[1], NULL, 10);
    if (n < 1)
        fail("usage", "N must be at least 1");
    signal(SIGPIPE, SIG_IGN);

    static program programs[MAX_PROGRAMS];
    int count = 0;
    for (int i = 2; i < argc;) {
        if (count == MAX_PROGRAMS)
            fail("usage", "at most 4 programs");
        int end = i;
        while (end < argc && strcmp(argv[end], "--") != 0)
            end++;
        if (end == i)
            fail("usage", "an empty program");
        argv[end < argc ? end : argc] = NULL; /* argv[argc] is NULL already */
        start(&programs[count], argv + i);
        programs[count].times = calloc((size_t)n, sizeof(double));
        if (programs[count].times == NULL)
            fail("calloc", NULL);
        count++;
        i = end + 1;
    }

    static const char init[] = "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\","
                               "\"params\":{\"protocolVersion\":\"1.0\"}}\n";
    static const char initialized[] = "{\"jsonrpc\":\"2.0\",\"method\":\"initialized\",\"params\":{}}\n";
    static const char setup[] = "{\"jsonrpc\":\"2.0\",\"id\":\"setup\",\"method\":\"requestOAuthTokens\","
                                "\"params\":{\"provider\":\"bench\",\"flow\":\"session\",\"sessionId\":\"bench\"}}\n";
    const char *params = getenv("ROUND_TRIP_PARAMS");
    if (params == NULL)
        params = "{\"provider\":\"bench\"}";
    if (strlen(params) > 2048)
        fail("ROUND_TRIP_PARAMS", "over 2048 bytes");
    const char *setting_up = getenv("ROUND_TRIP_SETUP");
    for (int k = 0; k < count; k++) {
        send_line(&programs[k], init, sizeof init - 1);
        read_answer(&programs[k], "0");
        send_line(&programs[k], initialized, sizeof initialized - 1);
        if (setting_up != NULL && strcmp(setting_up, "0") == 0)
            continue;
        send_line(&programs[k], setup, sizeof setup - 1);
        read_answer(&programs[k], "\"setup\"");
    }

    char line[4096], id[32];
    for (long i = 1; i <= WARMUP + n; i++) {
        snprintf(id, sizeof id, "%ld", i);
        int length =
            snprintf(line, sizeof line,
                     "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":\"getAccessToken\",\"params\":%s}\n", i, params);
        for (int turn = 0; turn < count; turn++) {
            program *p = &programs[(i + turn) % count];
            double t0 = now_us();
            send_line(p, line, (size_t)length);
            read_answer(p, id);
            double t1 = now_us();
            if (i > WARMUP)
                p->times[i - WARMUP - 1] = t1 - t0;
        }
    }

    printf("ROUND_TRIP [");
    for (int k = 0; k < count; k++) {
        program *p = &programs[k];
        close(p->to);
        int status;
        waitpid(p->pid, &status, 0);
        qsort(p->times, (size_t)n, sizeof(double), by_value);
        long at99 = (99 * n + 99) / 100 - 1;
        printf("%s{\"p50\":%.1f,\"p99\":%.1f,\"max\":%.1f}", k ? "," : "", p->times[(n - 1) / 2], p->times[at99],
               p->times[n - 1]);
    }
    printf("]\n");
    return 0;
}
