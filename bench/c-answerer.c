/*
 * c-answerer: the baseline for `make bench`.
 *
 * A minimal JSON-RPC 2.0 line answerer written the way a careful C program
 * would be: it reads stdin in large chunks, splits the chunk into lines,
 * parses every line with jansson (json_loadb), builds the answer with jansson
 * and serialises it (json_dumpb, compact) into an output buffer. The output
 * buffer is written with one write(2) per input chunk, i.e. it is flushed
 * exactly when no more input is already available -- the same batching a good
 * host does, so the comparison measures per-message work, not syscalls.
 *
 *   initialize            -> {"protocolVersion":"1.0","serverInfo":{...},"capabilities":{}}
 *   any other request     -> a small SignInStatus-like object
 *   notifications         -> no answer
 *   unparseable line      -> -32700 error with id null
 *
 * It exits 0 at stdin EOF.
 *
 * Build: gcc -O2 -o c-answerer bench/c-answerer.c -ljansson
 */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_CHUNK (256 * 1024)

static char *out;
static size_t out_len, out_cap;

static void die(const char *what)
{
    perror(what);
    exit(2);
}

static void out_reserve(size_t extra)
{
    if (out_len + extra <= out_cap)
        return;
    size_t cap = out_cap ? out_cap : 1 << 20;
    while (cap < out_len + extra)
        cap *= 2;
    out = realloc(out, cap);
    if (!out)
        die("realloc");
    out_cap = cap;
}

static void out_flush(void)
{
    size_t off = 0;
    while (off < out_len) {
        ssize_t n = write(STDOUT_FILENO, out + off, out_len - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EPIPE)
                exit(0); /* reader went away */
            die("write");
        }
        off += (size_t)n;
    }
    out_len = 0;
}

static void emit(json_t *msg)
{
    /* serialise once, straight into the output buffer (again only if the
       free space was too small) */
    out_reserve(4096);
    size_t need = json_dumpb(msg, out + out_len, out_cap - out_len - 1, JSON_COMPACT);
    if (need == 0)
        die("json_dumpb");
    if (need > out_cap - out_len - 1) {
        out_reserve(need + 1);
        json_dumpb(msg, out + out_len, need, JSON_COMPACT);
    }
    out_len += need;
    out[out_len++] = '\n';
    json_decref(msg);
}

static void answer_line(const char *line, size_t len)
{
    if (len > 0 && line[len - 1] == '\r')
        len--;
    if (len == 0)
        return; /* blank lines are ignored */

    json_error_t err;
    json_t *req = json_loadb(line, len, JSON_REJECT_DUPLICATES, &err);
    if (!req || !json_is_object(req)) {
        emit(json_pack("{s:s,s:n,s:{s:i,s:s}}", "jsonrpc", "2.0", "id", "error", "code", -32700, "message",
                       "parse error"));
        json_decref(req);
        return;
    }

    json_t *id = json_object_get(req, "id");
    const char *method = json_string_value(json_object_get(req, "method"));
    if (!id || !method) { /* notification, or a response from the client */
        json_decref(req);
        return;
    }

    json_t *result;
    if (strcmp(method, "initialize") == 0) {
        result = json_pack("{s:s,s:{s:s,s:s},s:{}}", "protocolVersion", "1.0", "serverInfo", "name", "c-answerer",
                           "version", "0", "capabilities");
    } else {
        const char *provider = json_string_value(json_object_get(json_object_get(req, "params"), "provider"));
        result = json_pack("{s:s,s:s,s:n,s:n,s:s}", "provider", provider ? provider : "", "state", "signedIn",
                           "account", "expiresAt", "reason", "valid");
    }
    emit(json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id, "result", result));
    json_decref(req);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);

    size_t cap = READ_CHUNK * 2, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        die("malloc");

    for (;;) {
        if (cap - len < READ_CHUNK) { /* a very long partial line: grow */
            cap *= 2;
            buf = realloc(buf, cap);
            if (!buf)
                die("realloc");
        }
        ssize_t n = read(STDIN_FILENO, buf + len, cap - len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("read");
        }
        if (n == 0)
            break;
        len += (size_t)n;

        /* answer every complete line in the buffer, then flush once */
        size_t start = 0;
        char *nl;
        while ((nl = memchr(buf + start, '\n', len - start)) != NULL) {
            size_t end = (size_t)(nl - buf);
            answer_line(buf + start, end - start);
            start = end + 1;
        }
        memmove(buf, buf + start, len - start);
        len -= start;
        out_flush();
    }
    if (len > 0)
        answer_line(buf, len); /* last line without '\n' */
    out_flush();
    free(buf);
    free(out);
    return 0;
}
