/*
 * authbridge_http.h — the host's HTTP transport (libAuthBridgeHTTP.so), dlopen'ed by the host
 * (Sources/AuthBridgeNetwork/HTTPClient.swift) on its first request.
 *
 * Request (JSON):  {"method","url","headers":{name: value},"body"?: string,"timeoutMs"?: int}
 * Answer (JSON):   {"status": int,"headers":{lower-case name: value},"body": string}
 *               or {"error":{"reason": timeout|refused|reset|dns|tls|protocol|network|cancelled|
 *                                      tooLarge|invalidRequest,"message": string}}
 *
 * `done` receives the answer's bytes (valid only during the call) exactly once per perform.
 * `cancel` may be called any time before `release` (after `done` it does nothing); `release`
 * once, after `done`. Threads: see http.c.
 */
#ifndef AUTHBRIDGE_HTTP_H
#define AUTHBRIDGE_HTTP_H
#include <stddef.h>
#include <stdint.h>

typedef void (*authbridge_http_done)(void *context, const uint8_t *answer, size_t length);

void *authbridge_http_perform_v1(const uint8_t *request, size_t length, void *context, authbridge_http_done done);
void authbridge_http_cancel_v1(void *handle);
void authbridge_http_release_v1(void *handle);

#endif
