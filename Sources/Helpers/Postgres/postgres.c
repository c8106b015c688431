/*
 * postgres.c — the PostgreSQL vault's connections (libAuthBridgePostgres.so), over libpq.
 *
 * libpq is used in its non-blocking mode so that every wait is a poll(2) with a deadline on
 * the connection's socket and on a pipe of its own: a statement, a connection attempt or a
 * wait for notifications never outlasts its bound, and another thread can wake it
 * (ab_pg_interrupt writes a byte into the pipe). A call drains the pipe when it starts, so an
 * interrupt meant for an earlier call is not taken for its own.
 *
 * A call that gave up (timed out, interrupted) leaves its statement behind on the server: the
 * connection is marked unusable and the caller closes it; the server ends the statement when it
 * finds its client gone, or at its own statement_timeout. No cancel request is sent: it would
 * open a second connection without a bound (PQcancel) to a server that may be unreachable.
 *
 * Messages are libpq's and the server's primary messages: they name the server, the database,
 * the user and the object concerned, never a password or a parameter's value.
 */

#define _GNU_SOURCE /* pipe2, asprintf */
#include "authbridge_postgres.h"
#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct ab_pg {
    PGconn *conn;
    int wake[2]; /* [0] is polled, [1] written by ab_pg_interrupt */
    int unusable;
};

struct ab_pg_result {
    PGresult *result;
};

static char *copy(const char *text)
{
    return strdup(text != NULL ? text : "");
}

/* A copy of libpq's message without its trailing line break (libpq ends messages with one). */
static char *message_of(const char *text, const char *fallback)
{
    char *message = copy(text != NULL && *text != '\0' ? text : fallback);
    size_t length = strlen(message);
    while (length > 0 && (message[length - 1] == '\n' || message[length - 1] == ' '))
        message[--length] = '\0';
    for (char *c = message; *c != '\0'; c++) {
        if (*c == '\n' || *c == '\t')
            *c = ' ';
    }
    return message;
}

static long long now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static void drain(int fd)
{
    char buffer[64];
    while (read(fd, buffer, sizeof buffer) > 0) {}
}

/* Waits until the socket is ready for `events`, the deadline passes or the pipe is written.
   Returns AB_PG_OK (ready), AB_PG_TIMED_OUT, AB_PG_INTERRUPTED or AB_PG_CONNECTION_LOST. */
static int wait_socket(ab_pg *pg, int socket, short events, long long deadline)
{
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0)
            return AB_PG_TIMED_OUT;
        struct pollfd fds[2] = { { socket, events, 0 }, { pg->wake[0], POLLIN, 0 } };
        int ready = poll(fds, 2, left > 60000 ? 60000 : (int)left);
        if (ready < 0) {
            if (errno == EINTR)
                continue;
            return AB_PG_CONNECTION_LOST;
        }
        if (fds[1].revents != 0)
            return AB_PG_INTERRUPTED;
        if (fds[0].revents != 0)
            return AB_PG_OK;
    }
}

/* Ends a call that gave up: the connection cannot be used again. */
static int give_up(ab_pg *pg, int status, char **error)
{
    pg->unusable = 1;
    if (error != NULL) {
        if (status == AB_PG_TIMED_OUT)
            *error = copy("the database did not answer in time");
        else if (status == AB_PG_INTERRUPTED)
            *error = copy("the call was interrupted");
        else
            *error = message_of(PQerrorMessage(pg->conn), "the connection to the database was lost");
    }
    return status;
}

int ab_pg_connect(const char *conninfo, int timeout_ms, ab_pg **connection, char *sqlstate, char **error)
{
    *connection = NULL;
    sqlstate[0] = '\0';
    ab_pg *pg = calloc(1, sizeof *pg);
    if (pg == NULL || pipe2(pg->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        free(pg);
        *error = copy("out of memory or file descriptors");
        return AB_PG_CONNECTION_LOST;
    }
    char *invalid = NULL;
    PQconninfoOption *parsed = PQconninfoParse(conninfo, &invalid);
    if (parsed == NULL) {
        close(pg->wake[0]);
        close(pg->wake[1]);
        free(pg);
        *error = message_of(invalid, "the connection string cannot be read");
        PQfreemem(invalid);
        return AB_PG_INVALID;
    }
    PQconninfoFree(parsed);
    /* Defaults first: what the connection string says wins (libpq applies key words in order). */
    const char *keywords[] = { "fallback_application_name", "keepalives_idle", "keepalives_interval",
                               "keepalives_count",          "dbname",          NULL };
    const char *values[] = { "authbridge", "10", "5", "3", conninfo, NULL };
    pg->conn = PQconnectStartParams(keywords, values, 1);
    int status = AB_PG_OK;
    if (pg->conn == NULL || PQstatus(pg->conn) == CONNECTION_BAD) {
        status = AB_PG_CONNECTION_LOST;
    } else {
        long long deadline = now_ms() + timeout_ms;
        PostgresPollingStatusType polling = PGRES_POLLING_WRITING;
        while (polling != PGRES_POLLING_OK) {
            if (polling == PGRES_POLLING_FAILED) {
                status = AB_PG_CONNECTION_LOST;
                break;
            }
            status = wait_socket(pg, PQsocket(pg->conn), polling == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline);
            if (status != AB_PG_OK)
                break;
            polling = PQconnectPoll(pg->conn);
        }
    }
    if (status == AB_PG_OK && PQsetnonblocking(pg->conn, 1) != 0)
        status = AB_PG_CONNECTION_LOST;
    if (status != AB_PG_OK) {
        if (status == AB_PG_TIMED_OUT)
            *error = copy("no connection within the time allowed");
        else
            *error = message_of(pg->conn != NULL ? PQerrorMessage(pg->conn) : NULL, "cannot connect to the database");
        /* A refusal by the server (authentication, no such database, no CONNECT privilege)
           is not worth retrying: tell it apart by its words, the one thing libpq gives. */
        if (strstr(*error, "authentication failed") != NULL)
            strcpy(sqlstate, "28P01");
        else if (strstr(*error, "permission denied") != NULL)
            strcpy(sqlstate, "42501");
        else if (strstr(*error, "database \"") != NULL && strstr(*error, "does not exist") != NULL)
            strcpy(sqlstate, "3D000");
        else if (strstr(*error, "does not exist") != NULL || strstr(*error, "no pg_hba.conf entry") != NULL)
            strcpy(sqlstate, "28000");
        ab_pg_close(pg);
        return status;
    }
    *connection = pg;
    return AB_PG_OK;
}

void ab_pg_close(ab_pg *pg)
{
    if (pg == NULL)
        return;
    if (pg->conn != NULL)
        PQfinish(pg->conn);
    close(pg->wake[0]);
    close(pg->wake[1]);
    free(pg);
}

int ab_pg_usable(const ab_pg *pg)
{
    return !pg->unusable && PQstatus(pg->conn) == CONNECTION_OK && PQtransactionStatus(pg->conn) == PQTRANS_IDLE;
}

/* Reads what the server sent until a result is complete (PQisBusy is 0). */
static int await_result(ab_pg *pg, long long deadline, char **error)
{
    while (PQisBusy(pg->conn)) {
        int status = wait_socket(pg, PQsocket(pg->conn), POLLIN, deadline);
        if (status != AB_PG_OK)
            return give_up(pg, status, error);
        if (!PQconsumeInput(pg->conn))
            return give_up(pg, AB_PG_CONNECTION_LOST, error);
    }
    return AB_PG_OK;
}

int ab_pg_exec(ab_pg *pg, const char *sql, int count, const char *const *values, int timeout_ms, ab_pg_result **result,
               char *sqlstate, char **error)
{
    *result = NULL;
    sqlstate[0] = '\0';
    drain(pg->wake[0]);
    if (pg->unusable || PQstatus(pg->conn) != CONNECTION_OK) {
        *error = copy("the connection to the database is not usable");
        pg->unusable = 1;
        return AB_PG_CONNECTION_LOST;
    }
    long long deadline = now_ms() + timeout_ms;
    if (!PQsendQueryParams(pg->conn, sql, count, NULL, values, NULL, NULL, 0))
        return give_up(pg, AB_PG_CONNECTION_LOST, error);
    int flushed;
    while ((flushed = PQflush(pg->conn)) == 1) {
        int status = wait_socket(pg, PQsocket(pg->conn), POLLIN | POLLOUT, deadline);
        if (status != AB_PG_OK)
            return give_up(pg, status, error);
        if (!PQconsumeInput(pg->conn))
            return give_up(pg, AB_PG_CONNECTION_LOST, error);
    }
    if (flushed < 0)
        return give_up(pg, AB_PG_CONNECTION_LOST, error);
    PGresult *kept = NULL;
    for (;;) {
        int status = await_result(pg, deadline, error);
        if (status != AB_PG_OK) {
            PQclear(kept);
            return status;
        }
        PGresult *next = PQgetResult(pg->conn);
        if (next == NULL)
            break;
        /* One statement gives one result; an error result is the one kept. */
        if (kept == NULL || PQresultStatus(next) == PGRES_FATAL_ERROR) {
            PQclear(kept);
            kept = next;
        } else {
            PQclear(next);
        }
    }
    if (kept == NULL)
        return give_up(pg, AB_PG_CONNECTION_LOST, error);
    ExecStatusType outcome = PQresultStatus(kept);
    if (outcome == PGRES_TUPLES_OK || outcome == PGRES_COMMAND_OK) {
        *result = malloc(sizeof **result);
        if (*result == NULL) {
            PQclear(kept);
            *error = copy("out of memory");
            return AB_PG_CONNECTION_LOST;
        }
        (*result)->result = kept;
        return AB_PG_OK;
    }
    const char *state = PQresultErrorField(kept, PG_DIAG_SQLSTATE);
    if (state != NULL && strlen(state) == 5)
        memcpy(sqlstate, state, 6);
    *error = message_of(PQresultErrorField(kept, PG_DIAG_MESSAGE_PRIMARY), "the statement failed");
    PQclear(kept);
    if (PQstatus(pg->conn) != CONNECTION_OK) {
        pg->unusable = 1;
        return sqlstate[0] != '\0' ? AB_PG_SERVER_ERROR : AB_PG_CONNECTION_LOST;
    }
    return AB_PG_SERVER_ERROR;
}

int ab_pg_rows(const ab_pg_result *result)
{
    return PQntuples(result->result);
}

int ab_pg_columns(const ab_pg_result *result)
{
    return PQnfields(result->result);
}

const char *ab_pg_value(const ab_pg_result *result, int row, int column)
{
    if (row < 0 || row >= PQntuples(result->result) || column < 0 || column >= PQnfields(result->result) ||
        PQgetisnull(result->result, row, column))
        return NULL;
    return PQgetvalue(result->result, row, column);
}

void ab_pg_clear(ab_pg_result *result)
{
    if (result == NULL)
        return;
    PQclear(result->result);
    free(result);
}

int ab_pg_next_notification(ab_pg *pg, int timeout_ms, char **payload, char **error)
{
    *payload = NULL;
    drain(pg->wake[0]);
    long long deadline = now_ms() + timeout_ms;
    for (;;) {
        PGnotify *notification = PQnotifies(pg->conn);
        if (notification != NULL) {
            *payload = copy(notification->extra);
            PQfreemem(notification);
            return AB_PG_OK;
        }
        if (PQstatus(pg->conn) != CONNECTION_OK)
            return give_up(pg, AB_PG_CONNECTION_LOST, error);
        int status = wait_socket(pg, PQsocket(pg->conn), POLLIN, deadline);
        if (status == AB_PG_TIMED_OUT || status == AB_PG_INTERRUPTED)
            return status; /* nothing was under way: the connection stays usable */
        if (status != AB_PG_OK || !PQconsumeInput(pg->conn))
            return give_up(pg, AB_PG_CONNECTION_LOST, error);
    }
}

void ab_pg_interrupt(ab_pg *pg)
{
    char byte = 1;
    ssize_t written = write(pg->wake[1], &byte, 1);
    (void)written; /* a full pipe already wakes the waiter */
}

char *ab_pg_identity(const char *conninfo)
{
    PQconninfoOption *options = PQconninfoParse(conninfo, NULL);
    if (options == NULL)
        return NULL;
    const char *user = NULL, *database = NULL;
    for (PQconninfoOption *option = options; option->keyword != NULL; option++) {
        if (option->val == NULL || *option->val == '\0')
            continue;
        if (strcmp(option->keyword, "user") == 0)
            user = option->val;
        else if (strcmp(option->keyword, "dbname") == 0)
            database = option->val;
    }
    if (user == NULL)
        user = getenv("PGUSER");
    if (user == NULL || *user == '\0') {
        struct passwd *entry = getpwuid(geteuid());
        user = entry != NULL ? entry->pw_name : "?";
    }
    if (database == NULL)
        database = getenv("PGDATABASE");
    if (database == NULL || *database == '\0')
        database = user;
    char *identity = NULL;
    if (asprintf(&identity, "%s\t%s", user, database) < 0)
        identity = NULL;
    PQconninfoFree(options);
    return identity;
}

void ab_pg_free(char *value)
{
    free(value);
}
