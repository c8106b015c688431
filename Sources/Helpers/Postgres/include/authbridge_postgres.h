/*
 * authbridge_postgres.h — the PostgreSQL vault's connections (libAuthBridgePostgres.so, over
 * libpq), dlopen'ed by the host (Sources/AuthBridgeVault/Postgres.swift) the first time a
 * `--vault postgresql` host uses its vault, so that libpq stays off the start-up path and out
 * of hosts that keep their tokens elsewhere.
 *
 * Every call that waits is bounded (`timeout_ms`) and can be woken early from another thread
 * (ab_pg_interrupt). A statement that ran past its bound, was interrupted, or lost its
 * connection leaves the connection unusable (ab_pg_usable answers 0): close it.
 *
 * Statements take text parameters only (libpq's extended protocol): values never appear in
 * the statement's text, so neither pg_stat_activity nor a statement log shows them inline.
 *
 * Ownership: strings returned through out-parameters are allocated here; release them with
 * ab_pg_free. Results with ab_pg_clear. Threads: one thread at a time per connection, except
 * ab_pg_interrupt, which may be called from any thread while the connection is open.
 */
#ifndef AUTHBRIDGE_POSTGRES_H
#define AUTHBRIDGE_POSTGRES_H

/* What a call ended with. */
enum {
    AB_PG_OK = 0,
    /* The server answered with an error: `sqlstate` and `*error` say which. */
    AB_PG_SERVER_ERROR = 1,
    /* The connection failed or broke (the server went away, a network error). */
    AB_PG_CONNECTION_LOST = 2,
    /* No answer within `timeout_ms`. */
    AB_PG_TIMED_OUT = 3,
    /* ab_pg_interrupt woke the call. */
    AB_PG_INTERRUPTED = 4,
    /* The connection string cannot be read (`*error` says why). */
    AB_PG_INVALID = 5,
};

typedef struct ab_pg ab_pg;
typedef struct ab_pg_result ab_pg_result;

/* Opens a connection: `conninfo` is a libpq connection string (a postgresql:// URI or
   key=value pairs); application_name defaults to "authbridge". Waits at most `timeout_ms`.
   Returns a status; on AB_PG_OK, *connection is set. `sqlstate` (6 bytes) receives the
   server's code when it refused the connection (else ""). */
int ab_pg_connect(const char *conninfo, int timeout_ms, ab_pg **connection, char *sqlstate, char **error);

/* Closes the connection (the server releases its session locks). */
void ab_pg_close(ab_pg *connection);

/* 1 while the connection can be reused: no transaction left open, and it has not broken,
   timed out or been interrupted. */
int ab_pg_usable(const ab_pg *connection);

/* Runs one statement with `count` text parameters (NULL: SQL null) and waits at most
   `timeout_ms` for its result. On AB_PG_OK, *result holds the rows (possibly none). */
int ab_pg_exec(ab_pg *connection, const char *sql, int count, const char *const *values, int timeout_ms,
               ab_pg_result **result, char *sqlstate, char **error);

int ab_pg_rows(const ab_pg_result *result);
int ab_pg_columns(const ab_pg_result *result);
/* The value at (row, column) as text; NULL for SQL null or outside the result. */
const char *ab_pg_value(const ab_pg_result *result, int row, int column);
void ab_pg_clear(ab_pg_result *result);

/* On a connection that LISTENs: waits at most `timeout_ms` for the next notification.
   AB_PG_OK with *payload set (a notification came), AB_PG_TIMED_OUT (none came in time),
   AB_PG_INTERRUPTED, or AB_PG_CONNECTION_LOST (*error says why). */
int ab_pg_next_notification(ab_pg *connection, int timeout_ms, char **payload, char **error);

/* Wakes the call waiting on `connection` (it returns AB_PG_INTERRUPTED); a call that starts
   later is not affected. */
void ab_pg_interrupt(ab_pg *connection);

/* Whom `conninfo` connects as, for messages: "user<TAB>database", with libpq's defaults
   filled in (PGUSER, PGDATABASE, the login name); NULL when the string cannot be read. */
char *ab_pg_identity(const char *conninfo);

void ab_pg_free(char *value);

#endif
