/*
 * one-shot: one-shot clients of two agents on Unix sockets, timed by a C client, for
 * bench/oidc_agent.py.
 *
 * A one-shot client is what a command that asks for one token does: connect, ask, read the
 * answer, close. Python spends tens of microseconds of its own per exchange; this client about a
 * microsecond, so what it prints is what the agents add.
 *
 * - AuthBridge (`authbridge agent`): connect; the `initialize` request line; read its answer;
 *   the `initialized` notification and `getAccessToken {"provider": PROFILE}` in one write; read
 *   lines until the answer of id 2 (a `result`); close.
 * - oidc-agent: connect; its plain JSON request {"request":"access_token","account":ACCOUNT,
 *   "min_valid_period":60}; read until it closes the connection (it answers once); close.
 *
 * After WARMUP untimed exchanges with each, N exchanges with each, one by one, alternating
 * (A B, B A, A B ...). Prints one line:
 *
 *   ONE_SHOT {"authbridge":{"p50":U,"p90":U,"p99":U,"max":U},"authbridge_pipelined":{...},"oidc_agent":{...},
 *             "initialize_bytes":B}
 *
 * (`authbridge_pipelined`: the three frames written at once, as `authbridge token` does.)
 *
 * (microseconds; B: the size of the agent's `initialize` answer line, its newline included) and
 * exits 0, or 1 with a message when an exchange failed.
 *
 * Usage: one-shot N WARMUP AUTHBRIDGE_SOCKET PROFILE OIDC_SOCKET ACCOUNT
 * Build: gcc -O2 -o one-shot bench/one-shot.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define BUFFER_BYTES (1 << 16)

static char buffer[BUFFER_BYTES];

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "one-shot: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int connect_to(const char *path)
{
    struct sockaddr_un address = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof address.sun_path)
        fail("socket path too long", path);
    strcpy(address.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof address) != 0)
        fail("connect", path);
    return fd;
}

static void write_all(int fd, const char *data, size_t length)
{
    while (length > 0) {
        ssize_t n = write(fd, data, length);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            fail("write", strerror(errno));
        data += n;
        length -= (size_t)n;
    }
}

/* Reads lines (into buffer, from offset *have) until one holds `id_marker`; returns that line's
 * length (its newline included) and leaves it at the start of the buffer. */
static size_t read_answer(int fd, size_t *have, const char *id_marker)
{
    for (;;) {
        char *start = buffer;
        char *end;
        while ((end = memchr(start, '\n', *have - (size_t)(start - buffer))) != NULL) {
            size_t length = (size_t)(end - start) + 1;
            if (memmem(start, length, id_marker, strlen(id_marker)) != NULL) {
                memmove(buffer, start, *have - (size_t)(start - buffer));
                *have -= (size_t)(start - buffer);
                return length;
            }
            start = end + 1; /* a notification: skipped */
        }
        size_t left = *have - (size_t)(start - buffer);
        memmove(buffer, start, left);
        *have = left;
        if (*have == sizeof buffer)
            fail("answer line too long", NULL);
        ssize_t n = read(fd, buffer + *have, sizeof buffer - *have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            fail("the agent closed the connection before answering", id_marker);
        *have += (size_t)n;
    }
}

static size_t authbridge_exchange(const char *path, const char *profile)
{
    static const char initialize[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
                                     "{\"protocolVersion\":\"1.0\",\"clientInfo\":{\"name\":\"bench\"}}}\n";
    char request[512];
    int length =
        snprintf(request, sizeof request,
                 "{\"jsonrpc\":\"2.0\",\"method\":\"initialized\",\"params\":{}}\n"
                 "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"getAccessToken\",\"params\":{\"provider\":\"%s\"}}\n",
                 profile);
    int fd = connect_to(path);
    size_t have = 0;
    write_all(fd, initialize, sizeof initialize - 1);
    size_t initialize_bytes = read_answer(fd, &have, "\"id\":1");
    memmove(buffer, buffer + initialize_bytes, have - initialize_bytes);
    have -= initialize_bytes;
    write_all(fd, request, (size_t)length);
    size_t answer = read_answer(fd, &have, "\"id\":2");
    if (memmem(buffer, answer, "\"result\"", 8) == NULL) {
        buffer[answer - 1] = 0;
        fail("getAccessToken failed", buffer);
    }
    close(fd);
    return initialize_bytes;
}

/* The front door's exchange (Sources/authbridge/agent_link.c): the three frames written at once,
 * both answers read (the agent may answer the token first). */
static void authbridge_pipelined(const char *path, const char *profile)
{
    char request[768];
    int length =
        snprintf(request, sizeof request,
                 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
                 "{\"protocolVersion\":\"1.0\",\"clientInfo\":{\"name\":\"bench\"}}}\n"
                 "{\"jsonrpc\":\"2.0\",\"method\":\"initialized\",\"params\":{}}\n"
                 "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"getAccessToken\",\"params\":{\"provider\":\"%s\"}}\n",
                 profile);
    int fd = connect_to(path);
    write_all(fd, request, (size_t)length);
    size_t have = 0;
    int seen = 0;
    while (seen != 3) {
        size_t line = read_answer(fd, &have, "\"id\":");
        if (memmem(buffer, line, "\"id\":1", 6) != NULL)
            seen |= 1;
        else if (memmem(buffer, line, "\"result\"", 8) != NULL)
            seen |= 2;
        else
            fail("getAccessToken failed", NULL);
        memmove(buffer, buffer + line, have - line);
        have -= line;
    }
    close(fd);
}

static void oidc_exchange(const char *path, const char *account)
{
    char request[512];
    int length = snprintf(request, sizeof request,
                          "{\"request\":\"access_token\",\"account\":\"%s\",\"min_valid_period\":60}", account);
    int fd = connect_to(path);
    write_all(fd, request, (size_t)length);
    size_t have = 0;
    for (;;) {
        ssize_t n = read(fd, buffer + have, sizeof buffer - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            fail("read", strerror(errno));
        if (n == 0)
            break;
        have += (size_t)n;
        if (have == sizeof buffer - 1)
            fail("oidc-agent's answer is too long", NULL);
    }
    buffer[have] = 0;
    if (strstr(buffer, "\"success\"") == NULL)
        fail("oidc-agent failed", buffer);
    close(fd);
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double at(const double *sorted, int n, double p)
{
    int i = (int)(p * (n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

static void print_summary(const char *name, double *times, int n, int last)
{
    qsort(times, (size_t)n, sizeof *times, by_value);
    printf("\"%s\":{\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,\"max\":%.1f}%s", name, at(times, n, 0.5), at(times, n, 0.9),
           at(times, n, 0.99), times[n - 1], last ? "" : ",");
}

int main(int argc, char **argv)
{
    if (argc != 7)
        fail("usage", "one-shot N WARMUP AUTHBRIDGE_SOCKET PROFILE OIDC_SOCKET ACCOUNT");
    int n = atoi(argv[1]), warmup = atoi(argv[2]);
    if (n < 1 || warmup < 0)
        fail("N must be at least 1", NULL);
    double *ours = calloc((size_t)n, sizeof *ours), *theirs = calloc((size_t)n, sizeof *theirs);
    double *pipelined = calloc((size_t)n, sizeof *pipelined);
    if (!ours || !theirs || !pipelined)
        fail("out of memory", NULL);
    size_t initialize_bytes = 0;
    for (int i = 0; i < warmup; i++) {
        initialize_bytes = authbridge_exchange(argv[3], argv[4]);
        authbridge_pipelined(argv[3], argv[4]);
        oidc_exchange(argv[5], argv[6]);
    }
    for (int i = 0; i < n; i++) {
        /* A B C, B C A, C A B: whatever the first of a round pays (or saves) falls on all alike. */
        for (int turn = 0; turn < 3; turn++) {
            int which = (turn + i) % 3;
            double t0 = now_us();
            if (which == 0) {
                initialize_bytes = authbridge_exchange(argv[3], argv[4]);
                ours[i] = now_us() - t0;
            } else if (which == 1) {
                authbridge_pipelined(argv[3], argv[4]);
                pipelined[i] = now_us() - t0;
            } else {
                oidc_exchange(argv[5], argv[6]);
                theirs[i] = now_us() - t0;
            }
        }
    }
    printf("ONE_SHOT {");
    print_summary("authbridge", ours, n, 0);
    print_summary("authbridge_pipelined", pipelined, n, 0);
    print_summary("oidc_agent", theirs, n, 0);
    printf("\"initialize_bytes\":%zu}\n", initialize_bytes);
    return 0;
}
