#ifndef AUTHBRIDGE_PROCESS_H
#define AUTHBRIDGE_PROCESS_H

/* What the authbridge executable does first, in C because Swift cannot call
   prctl(2) (a variadic function). */

/* No core dumps (RLIMIT_CORE 0) and not dumpable (PR_SET_DUMPABLE 0: no core
   file, no ptrace attach or /proc/<pid>/mem access by this user's other
   processes): the vault key and tokens live in this process's memory.
   Returns 0, or the errno of the step that failed. */
int ab_process_harden(void);

/* Removes the variable `name` from the environment and returns a malloc'ed
   copy of its value (NULL when unset): later children never inherit it. The
   original bytes, which /proc/<pid>/environ keeps showing after unsetenv,
   are overwritten with zeros. */
char *ab_process_take_variable(const char *name);

#endif
