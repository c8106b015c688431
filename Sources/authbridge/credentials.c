/* `token`, `exec-credential` and git's `get` and `store`, answered from the agent: the plain
   spellings only. Each declines (-1) whatever authbridge-cli would answer differently from
   "the token, printed": an option it does not take here, a value to check, a warning to give
   (a short or DPoP-bound token), an error. The CLI's commands (Sources/authbridge-cli:
   Token.swift, ExecCredential.swift, GitCredential.swift) are the reference. */

#define _GNU_SOURCE
#include "front_door.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DECLINE (-1)

bool ab_visible_ascii(const char *text)
{
    for (const unsigned char *c = (const unsigned char *)text; *c != 0; c++) {
        if (*c < 0x21 || *c > 0x7E) {
            return false;
        }
    }
    return true;
}

/* The options a command takes here, each at most once, as `--name value` or `--name=value`
   (`--agent` and `--no-agent` alone); one positional word. */
typedef struct {
    bool agent;
    bool no_agent;
    const char *positional;
    const char *account;
    const char *profile;
    const char *username;
    const char *min_validity;
} options;

/* Reads `args` into `found`; false for anything else (help, another option, a repeat, a
   value that looks like an option, a second positional word). `allowed` lists the value
   options taken ("account", "profile", "username", "min-validity"). */
static bool read_options(int count, char **args, const char *const *allowed, options *found)
{
    memset(found, 0, sizeof *found);
    for (int i = 0; i < count; i++) {
        const char *word = args[i];
        if (strncmp(word, "--", 2) != 0) {
            if (word[0] == '-' || word[0] == '\0' || found->positional != NULL) {
                return false;
            }
            found->positional = word;
            continue;
        }
        const char *name = word + 2;
        bool *flag = strcmp(name, "agent") == 0      ? &found->agent
                     : strcmp(name, "no-agent") == 0 ? &found->no_agent
                                                     : NULL;
        if (flag != NULL) {
            if (*flag) {
                return false;
            }
            *flag = true;
            if (found->agent && found->no_agent) {
                return false;
            }
            continue;
        }
        const char *equals = strchr(name, '=');
        size_t length = equals != NULL ? (size_t)(equals - name) : strlen(name);
        const char *value = NULL;
        if (equals != NULL) {
            value = equals + 1;
        } else if (i + 1 < count && args[i + 1][0] != '-') {
            value = args[++i];
        }
        if (value == NULL || value[0] == '\0') {
            return false;
        }
        const char **slot = NULL;
        for (const char *const *option = allowed; *option != NULL; option++) {
            if (strlen(*option) == length && strncmp(*option, name, length) == 0) {
                slot = strcmp(*option, "account") == 0    ? &found->account
                       : strcmp(*option, "profile") == 0  ? &found->profile
                       : strcmp(*option, "username") == 0 ? &found->username
                                                          : &found->min_validity;
            }
        }
        if (slot == NULL || *slot != NULL) {
            return false;
        }
        *slot = value;
    }
    return true;
}

/* `--min-validity SECONDS`: 0…86400 (the CLI's MinimumValidity); -1 when not given, -2 when
   not a number in range (the CLI explains). */
static long long min_validity_seconds(const char *text)
{
    if (text == NULL) {
        return -1;
    }
    char *end = NULL;
    errno = 0;
    long long seconds = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || text[0] == '+' || seconds < 0 || seconds > 86400) {
        return -2;
    }
    return seconds;
}

static long long now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static bool is_bearer(const ab_token *token)
{
    return strcasecmp(token->token_type, "bearer") == 0;
}

/* Writes all of `text` to stdout; false when it could not (the exit code says so). */
static bool print_all(const char *text)
{
    size_t left = strlen(text);
    while (left > 0) {
        ssize_t written = write(1, text, left);
        if (written < 0 && errno == EINTR) {
            continue;
        }
        if (written <= 0) {
            return false;
        }
        text += written;
        left -= (size_t)written;
    }
    return true;
}

/* Prints `text`, then zeroes and frees it; the exit code. */
static int print_secret(char *text)
{
    bool printed = print_all(text);
    explicit_bzero(text, strlen(text));
    free(text);
    return printed ? 0 : 1;
}

int ab_token_command(int count, char **args)
{
    static const char *const allowed[] = { "account", "min-validity", NULL };
    options found;
    if (!read_options(count, args, allowed, &found) || found.positional == NULL) {
        return DECLINE;
    }
    long long seconds = min_validity_seconds(found.min_validity);
    if (seconds == -2) {
        return DECLINE;
    }
    if (found.no_agent) {
        return AB_NO_AGENT;
    }
    ab_token token;
    int asked = ab_agent_access_token(found.positional, found.account, seconds >= 0 ? seconds * 1000 : -1, &token);
    if (asked != 0) {
        /* With --agent, no agent is an error the CLI explains. */
        return asked == AB_NO_AGENT && !found.agent ? AB_NO_AGENT : DECLINE;
    }
    /* Given with a warning by the CLI: a DPoP-bound token, one valid for less than asked. */
    bool short_lived = seconds >= 0 && token.expires_at_ms >= 0 && (token.expires_at_ms - now_ms()) / 1000 < seconds;
    char *line = NULL;
    if (!is_bearer(&token) || short_lived || !ab_visible_ascii(token.access_token) ||
        asprintf(&line, "%s\n", token.access_token) < 0) {
        ab_token_clear(&token);
        return DECLINE;
    }
    ab_token_clear(&token);
    return print_secret(line);
}

/* KUBERNETES_EXEC_INFO's apiVersion and spec.interactive; false when the CLI must explain. */
static bool exec_info(const char **api_version, bool *interactive)
{
    static const char *const versions[] = { "client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1" };
    const char *raw = getenv("KUBERNETES_EXEC_INFO");
    if (raw == NULL || raw[0] == '\0') {
        *api_version = versions[0];
        *interactive = isatty(0) == 1;
        return true;
    }
    json_t *info = json_loads(raw, 0, NULL);
    const char *asked = json_string_value(json_object_get(info, "apiVersion"));
    bool known = false;
    for (size_t i = 0; asked != NULL && i < 2; i++) {
        if (strcmp(asked, versions[i]) == 0) {
            *api_version = versions[i];
            known = true;
        }
    }
    *interactive = json_is_true(json_object_get(json_object_get(info, "spec"), "interactive"));
    json_decref(info);
    return known;
}

int ab_exec_credential_command(int count, char **args)
{
    static const char *const allowed[] = { "account", NULL };
    options found;
    const char *api_version = NULL;
    bool interactive = false;
    if (!read_options(count, args, allowed, &found) || found.positional == NULL || found.no_agent ||
        !exec_info(&api_version, &interactive)) {
        return DECLINE;
    }
    ab_token token;
    if (ab_agent_access_token(found.positional, found.account, -1, &token) != 0) {
        return DECLINE;
    }
    /* The CLI's ExecCredential, compact with sorted keys; a token it would escape goes to it. */
    char expiry[64] = "";
    if (token.expires_at_ms >= 0) {
        time_t seconds = (time_t)(token.expires_at_ms / 1000);
        struct tm parts;
        char stamp[32];
        if (gmtime_r(&seconds, &parts) == NULL || strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &parts) == 0) {
            ab_token_clear(&token);
            return DECLINE;
        }
        snprintf(expiry, sizeof expiry, "\"expirationTimestamp\":\"%s\",", stamp);
    }
    const char *access = token.access_token;
    char *text = NULL;
    if (!is_bearer(&token) || access[0] == '\0' || !ab_visible_ascii(access) || strpbrk(access, "\"\\") != NULL ||
        asprintf(
            &text,
            "{\"apiVersion\":\"%s\",\"kind\":\"ExecCredential\",\"spec\":{\"interactive\":%s},\"status\":{%s\"token\":"
            "\"%s\"}}\n",
            api_version, interactive ? "true" : "false", expiry, access) < 0) {
        ab_token_clear(&token);
        return DECLINE;
    }
    ab_token_clear(&token);
    return print_secret(text);
}

/* git's request, whole (git writes it before it reads): up to a blank line or the end, at
   most 1 MiB, as the CLI reads it. */
static bool read_request(char **request, size_t *length)
{
    size_t capacity = 4096, filled = 0;
    char *bytes = malloc(capacity);
    while (bytes != NULL && filled < (1 << 20)) {
        if (filled == capacity) {
            char *larger = realloc(bytes, capacity * 2);
            if (larger == NULL) {
                break;
            }
            bytes = larger;
            capacity *= 2;
        }
        ssize_t count = read(0, bytes + filled, capacity - filled);
        if (count < 0 && errno == EINTR) {
            continue;
        }
        if (count <= 0) {
            break;
        }
        filled += (size_t)count;
        /* A blank line (LF or CR LF) ends the request. */
        if (bytes[filled - 1] == '\n') {
            size_t end = filled - 1;
            if (end > 0 && bytes[end - 1] == '\r') {
                end--;
            }
            if (end == 0 || bytes[end - 1] == '\n') {
                break;
            }
        }
    }
    *request = bytes;
    *length = bytes != NULL ? filled : 0;
    return bytes != NULL;
}

/* The value of `key` in git's lines (the last one wins; up to the first blank line); NULL
   when absent. Malloc'ed. A `url` key, which stands for its parts, is reported through `url`. */
static char *request_value(const char *request, size_t length, const char *key, bool *url)
{
    char *value = NULL;
    size_t key_length = strlen(key);
    const char *line = request, *end = request + length;
    while (line < end) {
        const char *newline = memchr(line, '\n', (size_t)(end - line));
        const char *stop = newline != NULL ? newline : end;
        size_t line_length = (size_t)(stop - line);
        if (line_length > 0 && line[line_length - 1] == '\r') {
            line_length--;
        }
        if (line_length == 0) {
            break;
        }
        if (line_length >= 4 && strncmp(line, "url=", 4) == 0) {
            *url = true;
        }
        if (line_length > key_length && strncmp(line, key, key_length) == 0 && line[key_length] == '=') {
            free(value);
            value = strndup(line + key_length + 1, line_length - key_length - 1);
        }
        line = stop + 1;
    }
    return value;
}

/* A host git may name, as the CLI answers it at once: a DNS name or IPv4 address of
   letters, digits, dots and hyphens, with an optional port. */
static bool plain_host(const char *host)
{
    size_t name = strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-");
    if (name == 0 || host[0] == '.' || host[0] == '-') {
        return false;
    }
    if (host[name] == '\0') {
        return true;
    }
    const char *port = host + name + 1;
    return host[name] == ':' && port[0] != '\0' && strlen(port) <= 5 && strspn(port, "0123456789") == strlen(port);
}

/* The user name a profile gives git: its `gitUsername` in the configuration file (the CLI's
   --config default: $XDG_CONFIG_HOME/authbridge/config.json), else oauth2. NULL when the
   file cannot be read as the CLI reads it (it explains). Malloc'ed. */
static char *configured_username(const char *profile)
{
    const char *config = getenv("XDG_CONFIG_HOME");
    const char *home = getenv("HOME");
    char *path = NULL;
    int made = config != NULL && config[0] == '/' ? asprintf(&path, "%s/authbridge/config.json", config)
               : home != NULL && home[0] != '\0'  ? asprintf(&path, "%s/.config/authbridge/config.json", home)
                                                  : asprintf(&path, "%s", "");
    if (made < 0) {
        return NULL;
    }
    if (path[0] == '\0' || access(path, F_OK) != 0) {
        bool missing = path[0] == '\0' || errno == ENOENT;
        free(path);
        return missing ? strdup("oauth2") : NULL;
    }
    json_t *root = json_load_file(path, 0, NULL);
    free(path);
    json_t *profiles = json_object_get(root, "profiles");
    json_t *routes = json_object_get(root, "gitCredential");
    char *username = NULL;
    bool valid = json_is_object(root) && (profiles == NULL || json_is_object(profiles)) &&
                 (routes == NULL || json_is_object(routes));
    const char *name;
    json_t *entry;
    json_object_foreach(valid ? profiles : NULL, name, entry)
    {
        json_t *given = json_object_get(entry, "gitUsername");
        if (given == NULL) {
            continue;
        }
        const char *text = json_string_value(given);
        /* One line: no LF, CR, NUL (jansson refuses NUL in strings), nor the other line ends. */
        if (text == NULL || text[0] == '\0' || strpbrk(text, "\n\r\v\f") != NULL || strstr(text, "\xc2\x85") != NULL ||
            strstr(text, "\xe2\x80\xa8") != NULL || strstr(text, "\xe2\x80\xa9") != NULL) {
            valid = false;
            break;
        }
        if (strcmp(name, profile) == 0) {
            username = strdup(text);
        }
    }
    json_decref(root);
    if (!valid) {
        free(username);
        return NULL;
    }
    return username != NULL ? username : strdup("oauth2");
}

/* One line of one value: what the CLI accepts for --username. */
static bool one_line(const char *text)
{
    return text[0] != '\0' && strpbrk(text, "\n\r\v\f") == NULL && strstr(text, "\xc2\x85") == NULL &&
           strstr(text, "\xe2\x80\xa8") == NULL && strstr(text, "\xe2\x80\xa9") == NULL;
}

static int git_get(const options *found, const char *request, size_t length)
{
    bool url = false;
    char *scheme = request_value(request, length, "protocol", &url);
    char *host = request_value(request, length, "host", &url);
    char *asked_user = request_value(request, length, "username", &url);
    char *username = NULL;
    int outcome = DECLINE;
    /* https to a plain host: anything else (http to a loopback address, IPv6, a url key) the CLI checks. */
    if (!url && scheme != NULL && strcmp(scheme, "https") == 0 && host != NULL && plain_host(host)) {
        if (asked_user != NULL && asked_user[0] != '\0') {
            username = strdup(asked_user);
        } else if (found->username != NULL) {
            username = one_line(found->username) ? strdup(found->username) : NULL;
        } else {
            username = configured_username(found->profile);
        }
    }
    ab_token token;
    char *text = NULL;
    if (username != NULL && ab_agent_access_token(found->profile, found->account, -1, &token) == 0) {
        char expiry[48] = "";
        if (token.expires_at_ms >= 0) {
            snprintf(expiry, sizeof expiry, "password_expiry_utc=%lld\n", token.expires_at_ms / 1000);
        }
        if (is_bearer(&token) && token.access_token[0] != '\0' && ab_visible_ascii(token.access_token) &&
            asprintf(&text, "username=%s\npassword=%s\n%s", username, token.access_token, expiry) >= 0) {
            outcome = print_secret(text);
        }
        ab_token_clear(&token);
    }
    free(scheme);
    free(host);
    free(asked_user);
    free(username);
    return outcome;
}

int ab_git_credential_command(int count, char **args, char **request, size_t *length)
{
    static const char *const allowed[] = { "profile", "account", "username", NULL };
    options found;
    *request = NULL;
    *length = 0;
    if (!read_options(count, args, allowed, &found) || found.positional == NULL || found.no_agent) {
        return DECLINE;
    }
    bool get = strcmp(found.positional, "get") == 0;
    /* store: AuthBridge keeps the tokens (the CLI reads the request and does nothing). */
    bool store = strcmp(found.positional, "store") == 0;
    if (!(get && found.profile != NULL) && !store) {
        return DECLINE;
    }
    if (found.username != NULL && !one_line(found.username)) {
        return DECLINE;
    }
    if (!read_request(request, length)) {
        return DECLINE;
    }
    return store ? 0 : git_get(&found, *request, *length);
}
