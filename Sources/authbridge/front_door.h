#ifndef AUTHBRIDGE_FRONT_DOOR_H
#define AUTHBRIDGE_FRONT_DOOR_H

/* `authbridge`, the command on PATH, in C (bench/README, "Next to oidc-agent").
 *
 * git, kubectl and scripts run it for a token many times a minute; a Swift process costs
 * about 3 ms to start here before it does anything, and ArgumentParser's command line as
 * much again, where oidc-agent's `oidc-token` (C) answers in about 1.5 ms. So this program
 * is C and links only libc and jansson:
 *
 *   - `token PROFILE`, `exec-credential PROFILE` and git's `get` (`git-credential-authbridge
 *     --profile P get`) in their plain spellings are answered from the running agent's socket
 *     (main.c reads the command line, credentials.c writes the answer, agent_link.c speaks
 *     the bridge);
 *   - everything else, and every case with something to say (not signed in, an error, a
 *     warning, an option it does not know, no agent), is handed whole to the Swift programs by
 *     execv with the same arguments, environment and stdin: authbridge-host runs `serve`,
 *     `agent` and `plugin-runner`, authbridge-cli every other command. Their answers are the
 *     reference; this program gives the same bytes only for the cases it takes
 *     (Tests/contract/test_front_door.py holds the two to each other).
 */

#include <stdbool.h>
#include <stddef.h>

/* A token as the agent's getAccessToken answered it. `expires_at_ms` is -1 when the
   provider gave no expiry. Strings are malloc'ed; ab_token_clear zeroes and frees them. */
typedef struct {
    char *access_token;
    char *token_type;
    long long expires_at_ms;
} ab_token;

void ab_token_clear(ab_token *token);

/* What a command or ab_agent_access_token returns when no agent runs (no socket path, no
   socket, nothing listening), as opposed to -1 (the CLI answers). */
#define AB_NO_AGENT (-2)

/* Asks the running agent of this user for `profile`'s access token (`account`: NULL for the
   latest sign-in; `min_validity_ms`: -1 for the bridge's default). Returns 0 with `token`
   filled; AB_NO_AGENT when no agent runs; or -1 when the Swift CLI must answer instead: an
   agent of another user or one that cannot be reached, AUTHBRIDGE_VAULT_KEY set (the CLI says
   it goes unused), an error answer, an agent whose configuration has a problem, anything
   unexpected. Nothing is printed. */
int ab_agent_access_token(const char *profile, const char *account, long long min_validity_ms, ab_token *token);

/* The three commands. Each returns the exit code after printing its answer, or -1 when
   the CLI must run instead (nothing printed). `args` are the words after the command.
   ab_token_command returns AB_NO_AGENT when the token is this process's to find without an
   agent (`--no-agent`, or none running): authbridge-host answers that (TokenPrinting). */
int ab_token_command(int count, char **args);
int ab_exec_credential_command(int count, char **args);
/* git's helper; `request` and `request_length` receive what it read from stdin (malloc'ed),
   which the CLI must then read again. */
int ab_git_credential_command(int count, char **args, char **request, size_t *request_length);

/* Whether every byte of `text` is visible ASCII (RFC 6750's b64token and more): what the
   CLI prints unchanged. */
bool ab_visible_ascii(const char *text);

#endif
