/* One getAccessToken from the running agent, as a bridge client: connect to its socket,
   check it runs as this user, `initialize`, `initialized` and `getAccessToken` written at
   once (the agent handles a connection's frames in order), read the two answers, close.
   The socket's path is the one AgentSocket (AuthBridgeLaunch) and the CLI use. */

#define _GNU_SOURCE
#include "front_door.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* A live agent answers `initialize` in milliseconds; past this the CLI takes over (and
   says why). getAccessToken has no bound here: a refresh is the agent's, under its own. */
#define INITIALIZE_BOUND_MS 10000
/* An answer larger than this is not one this program reads (the CLI does). */
#define ANSWER_LIMIT (16 << 20)

void ab_token_clear(ab_token *token)
{
    if (token->access_token != NULL) {
        explicit_bzero(token->access_token, strlen(token->access_token));
        free(token->access_token);
    }
    free(token->token_type);
    token->access_token = NULL;
    token->token_type = NULL;
    token->expires_at_ms = -1;
}

static const char *set_variable(const char *name)
{
    const char *value = getenv(name);
    return value != NULL && value[0] != '\0' ? value : NULL;
}

/* AUTHBRIDGE_AGENT_SOCKET, else $XDG_RUNTIME_DIR/authbridge/agent.sock (an absolute
   XDG_RUNTIME_DIR only); false when there is none or it does not fit a sockaddr_un. */
static bool socket_path(struct sockaddr_un *address)
{
    memset(address, 0, sizeof *address);
    address->sun_family = AF_UNIX;
    const char *set = set_variable("AUTHBRIDGE_AGENT_SOCKET");
    int length;
    if (set != NULL) {
        length = snprintf(address->sun_path, sizeof address->sun_path, "%s", set);
    } else {
        const char *runtime = set_variable("XDG_RUNTIME_DIR");
        if (runtime == NULL || runtime[0] != '/') {
            return false;
        }
        length = snprintf(address->sun_path, sizeof address->sun_path, "%s/authbridge/agent.sock", runtime);
    }
    return length > 0 && (size_t)length < sizeof address->sun_path;
}

/* A connected socket to this user's agent; AB_NO_AGENT when none runs (no socket path, nothing
   there, nothing listening: the CLI then goes on without one in silence), -1 for the rest. */
static int connect_agent(void)
{
    struct sockaddr_un address;
    if (!socket_path(&address)) {
        return AB_NO_AGENT;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        int failure = errno;
        close(fd);
        return failure == ENOENT || failure == ECONNREFUSED ? AB_NO_AGENT : -1;
    }
    /* Anyone may listen at a path others can write to; only this user's agent gets the request. */
    struct ucred peer;
    socklen_t size = sizeof peer;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 || peer.uid != getuid()) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_all(int fd, const char *bytes, size_t count)
{
    while (count > 0) {
        ssize_t sent = send(fd, bytes, count, MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR) {
            continue;
        }
        if (sent <= 0) {
            return false;
        }
        bytes += sent;
        count -= (size_t)sent;
    }
    return true;
}

/* The three frames, one per line. */
static char *request_text(const char *profile, const char *account, long long min_validity_ms)
{
    json_t *params = json_pack("{s:s}", "provider", profile);
    if (params == NULL) {
        return NULL;
    }
    if (account != NULL) {
        json_object_set_new(params, "account", json_string(account));
    }
    if (min_validity_ms >= 0) {
        json_object_set_new(params, "minValidityMs", json_integer(min_validity_ms));
    }
    json_t *call =
        json_pack("{s:s,s:i,s:s,s:o}", "jsonrpc", "2.0", "id", 2, "method", "getAccessToken", "params", params);
    char *line = call != NULL ? json_dumps(call, JSON_COMPACT) : NULL;
    json_decref(call);
    if (line == NULL) {
        return NULL;
    }
    static const char opening[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
                                  "{\"protocolVersion\":\"1.0\",\"clientInfo\":{\"name\":\"authbridge-cli\"}}}\n"
                                  "{\"jsonrpc\":\"2.0\",\"method\":\"initialized\",\"params\":{}}\n";
    char *text = NULL;
    if (asprintf(&text, "%s%s\n", opening, line) < 0) {
        text = NULL;
    }
    free(line);
    return text;
}

/* What a line is: the initialize answer (fine or not), the getAccessToken answer, or
   something to skip (a notification: session changes go to every connection). */
enum line_kind { LINE_SKIP, LINE_INITIALIZED, LINE_TOKEN, LINE_REFUSED };

static enum line_kind read_line(const char *line, size_t length, ab_token *token)
{
    json_t *frame = json_loadb(line, length, JSON_DISABLE_EOF_CHECK, NULL);
    if (frame == NULL) {
        return LINE_REFUSED;
    }
    enum line_kind kind = LINE_SKIP;
    json_t *id = json_object_get(frame, "id");
    json_t *result = json_object_get(frame, "result");
    if (json_is_integer(id)) {
        kind = LINE_REFUSED;
        if (json_integer_value(id) == 1 && json_is_object(result)) {
            /* The agent cannot use the configuration file: the CLI fails as it would here. */
            if (json_object_get(result, "configurationProblem") == NULL) {
                kind = LINE_INITIALIZED;
            }
        } else if (json_integer_value(id) == 2 && json_is_object(result)) {
            json_t *access = json_object_get(result, "accessToken");
            json_t *type = json_object_get(result, "tokenType");
            json_t *expires = json_object_get(result, "expiresAt");
            if (json_is_string(access) && json_is_string(type) && (expires == NULL || json_is_integer(expires))) {
                token->access_token = strdup(json_string_value(access));
                token->token_type = strdup(json_string_value(type));
                token->expires_at_ms = expires != NULL ? (long long)json_integer_value(expires) : -1;
                kind = token->access_token != NULL && token->token_type != NULL ? LINE_TOKEN : LINE_REFUSED;
            }
        }
    }
    json_decref(frame);
    return kind;
}

/* Whether a line is a second answer with the token's id (never sent by a sound agent). */
static bool line_names_token(const char *line, size_t length)
{
    json_t *frame = json_loadb(line, length, JSON_DISABLE_EOF_CHECK, NULL);
    json_t *id = json_object_get(frame, "id");
    bool token = json_is_integer(id) && json_integer_value(id) == 2;
    json_decref(frame);
    return token;
}

/* Reads lines until both answers came (in either order: the agent may answer a token at once
   while `initialize` is still being answered); -1 on anything else. */
static int read_answers(int fd, ab_token *token)
{
    size_t capacity = 16384, filled = 0, scanned = 0;
    char *buffer = malloc(capacity);
    bool initialized = false, answered = false;
    int outcome = -1;
    while (buffer != NULL) {
        char *end = memchr(buffer + scanned, '\n', filled - scanned);
        if (end != NULL) {
            size_t length = (size_t)(end - buffer);
            enum line_kind kind =
                answered && line_names_token(buffer, length) ? LINE_REFUSED : read_line(buffer, length, token);
            if (kind == LINE_REFUSED) {
                break;
            }
            initialized = initialized || kind == LINE_INITIALIZED;
            answered = answered || kind == LINE_TOKEN;
            if (initialized && answered) {
                outcome = 0;
                break;
            }
            memmove(buffer, end + 1, filled - length - 1);
            filled -= length + 1;
            scanned = 0;
            continue;
        }
        scanned = filled;
        if (filled == capacity) {
            if (capacity >= ANSWER_LIMIT) {
                break;
            }
            char *larger = realloc(buffer, capacity * 2);
            if (larger == NULL) {
                break;
            }
            buffer = larger;
            capacity *= 2;
        }
        struct pollfd wait = { .fd = fd, .events = POLLIN };
        int ready = poll(&wait, 1, initialized ? -1 : INITIALIZE_BOUND_MS);
        if (ready < 0 && errno == EINTR) {
            continue;
        }
        if (ready <= 0) {
            break;
        }
        ssize_t count = read(fd, buffer + filled, capacity - filled);
        if (count < 0 && errno == EINTR) {
            continue;
        }
        if (count <= 0) {
            break;
        }
        filled += (size_t)count;
    }
    if (buffer != NULL) {
        explicit_bzero(buffer, capacity);
        free(buffer);
    }
    if (outcome != 0) {
        ab_token_clear(token);
    }
    return outcome;
}

int ab_agent_access_token(const char *profile, const char *account, long long min_validity_ms, ab_token *token)
{
    token->access_token = NULL;
    token->token_type = NULL;
    token->expires_at_ms = -1;
    int fd = connect_agent();
    if (fd < 0) {
        return fd;
    }
    /* The variable is the key of a vault in this process; the CLI says the agent keeps its own. */
    if (set_variable("AUTHBRIDGE_VAULT_KEY") != NULL) {
        close(fd);
        return -1;
    }
    char *request = request_text(profile, account, min_validity_ms);
    int outcome = -1;
    if (request != NULL && send_all(fd, request, strlen(request))) {
        outcome = read_answers(fd, token);
    }
    free(request);
    close(fd);
    return outcome;
}
