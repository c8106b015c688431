/* `authbridge`: which program answers a command line (front_door.h says why this one is C).
 *
 *   authbridge-host  serve, agent, plugin-runner; no arguments with stdin not a terminal (a
 *                    frontend's pipe); options first (`authbridge --plugins DIR`: serve)
 *   authbridge-cli   everything else (help, login, status, …), and whatever this program
 *                    declines below
 *   this program     token, exec-credential, git's get and store: answered from the agent
 *   authbridge-host  also `token` when no agent runs or --no-agent says so (from the vault)
 *
 * Both are found as authbridge-host finds authbridge-cli (AuthBridgeSystem's
 * HelperLibraryLocation): in lib/authbridge beside bin/ (the install tree), else beside this
 * executable (a build folder). Started as git-credential-authbridge, it is git's helper. */

#define _GNU_SOURCE
#include "front_door.h"

#include <authbridge_process.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char git_helper_name[] = "git-credential-authbridge";

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

/* Becomes `program` (authbridge-host or authbridge-cli) with the same arguments and
   environment; returns only to fail, with the reason said. */
static int run(const char *program, char **argv)
{
    char self[PATH_MAX];
    ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
    if (length <= 0) {
        fprintf(stderr, "authbridge: cannot find its own executable (/proc/self/exe: %s); reinstall AuthBridge.\n",
                strerror(errno));
        return 1;
    }
    self[length] = '\0';
    char *slash = strrchr(self, '/');
    *slash = '\0';
    const char *folder = self[0] != '\0' ? self : "/";
    /* lib/authbridge itself (a program there), else bin/../lib/authbridge; then this folder. */
    size_t folder_length = strlen(folder);
    static const char lib[] = "/lib/authbridge";
    char library[PATH_MAX + 32];
    if (folder_length >= sizeof lib - 1 && strcmp(folder + folder_length - (sizeof lib - 1), lib) == 0) {
        snprintf(library, sizeof library, "%s", folder);
    } else {
        const char *parent_end = strrchr(folder, '/');
        int parent_length = parent_end != NULL ? (int)(parent_end - folder) : 0;
        snprintf(library, sizeof library, "%.*s%s", parent_length, folder, lib);
    }
    char candidates[2][PATH_MAX + 64];
    int count = 0;
    snprintf(candidates[count++], sizeof candidates[0], "%s/%s", library, program);
    if (strcmp(library, folder) != 0) {
        snprintf(candidates[count++], sizeof candidates[0], "%s/%s", folder, program);
    }
    char failures[2 * (PATH_MAX + 160)] = "";
    for (int i = 0; i < count; i++) {
        execv(candidates[i], argv);
        size_t used = strlen(failures);
        snprintf(failures + used, sizeof failures - used, "%s%s: %s", i > 0 ? "; " : "", candidates[i],
                 strerror(errno));
    }
    fprintf(stderr, "authbridge: cannot run %s (%s); reinstall AuthBridge.\n", program, failures);
    return 1;
}

/* Hands the command line to authbridge-cli with git's request on stdin again (a sealed
   memory file holding what this program read). */
static int run_cli_with_request(char **argv, char *request, size_t length)
{
    if (request != NULL) {
        int fd = memfd_create("git-credential-request", MFD_CLOEXEC);
        bool ready =
            fd >= 0 && write(fd, request, length) == (ssize_t)length && lseek(fd, 0, SEEK_SET) == 0 && dup2(fd, 0) == 0;
        explicit_bzero(request, length);
        free(request);
        if (fd > 0) {
            close(fd);
        }
        if (!ready) {
            fprintf(stderr, "authbridge: cannot hand git's request on (%s).\n", strerror(errno));
            return 1;
        }
    }
    return run("authbridge-cli", argv);
}

/* Whether the host runs this command line: the words FastCommandLine (AuthBridgeLaunch)
   reads; it hands back to the CLI what it declines. */
static bool for_host(int count, char **args)
{
    if (count == 0) {
        return isatty(0) != 1; /* a person typing `authbridge` alone gets help */
    }
    const char *first = args[0];
    if (strcmp(first, "serve") == 0 || strcmp(first, "agent") == 0 || strcmp(first, "plugin-runner") == 0) {
        return true;
    }
    return strncmp(first, "--", 2) == 0 && strcmp(first, "--help") != 0 && strcmp(first, "--version") != 0 &&
           strcmp(first, "--help-hidden") != 0;
}

int main(int argc, char **argv)
{
    int count = argc - 1;
    char **args = argv + 1;
    bool git_helper = argc > 0 && strcmp(base_name(argv[0]), git_helper_name) == 0;
    if (!git_helper && for_host(count, args)) {
        return run("authbridge-host", argv);
    }
    if (!git_helper && count == 0) {
        return run("authbridge-cli", argv);
    }
    /* Tokens pass through this process: no core file, no ptrace by the user's other processes. */
    ab_process_harden();
    int answered = -1;
    char *request = NULL;
    size_t length = 0;
    if (git_helper) {
        bool spelled_out = count > 0 && strcmp(args[0], "git-credential") == 0;
        answered = ab_git_credential_command(count - spelled_out, args + spelled_out, &request, &length);
    } else if (strcmp(args[0], "token") == 0) {
        answered = ab_token_command(count - 1, args + 1);
        if (answered == AB_NO_AGENT) {
            return run("authbridge-host", argv);
        }
    } else if (strcmp(args[0], "exec-credential") == 0) {
        answered = ab_exec_credential_command(count - 1, args + 1);
    } else if (strcmp(args[0], "git-credential") == 0) {
        answered = ab_git_credential_command(count - 1, args + 1, &request, &length);
    }
    if (answered >= 0) {
        free(request);
        return answered;
    }
    return run_cli_with_request(argv, request, length);
}
