"""Framing and JSON-RPC 2.0 rules (bridge-spec/README.md §1, §3, §6)."""

import json
import os
import subprocess
import threading

import pytest

from conftest import DEFAULT_PROFILES, begin_sign_in, host_command, short, sign_in_session

SLOW = {"provider": "c", "flow": "session", "sessionId": "slow"}


def answered_next(host, send_bad):
    """Sends something bad, then a probe request; returns the frames in between.

    The host answers invalid frames from its reader thread in arrival order, so every
    answer to the bad input precedes the probe's answer.
    """
    mark = host.mark()
    send_bad()
    probe = host.send_request("listProviders", {})
    probe_answer = host.wait_response(probe)
    assert "result" in probe_answer, probe_answer
    with host.cond:
        frames = host.frames[mark:]
    return [f for f in frames if f is not probe_answer]


# ── Framing ──────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("line", [
    b"this is not json",
    b"{",
    b'{"jsonrpc":"2.0","id":1,"method":"listProviders"',
    b'{"jsonrpc":"2.0","id":1,"method":"listProviders",}',
], ids=["garbage", "open-brace", "truncated", "trailing-comma"])
def test_unparsable_line_is_a_parse_error_with_null_id(host, line):
    mark = host.mark()
    host.send_line(line)
    error = host.wait_null_id_error(since=mark)
    assert error["error"]["code"] == -32700
    assert error["id"] is None


def test_invalid_utf8_is_a_parse_error_and_the_host_keeps_serving(host):
    frames = answered_next(host, lambda: host.send_line(
        b'{"jsonrpc":"2.0","id":"u","method":"listProviders","params":{"x":"\xff\xfe\xc3"}}'))
    assert len(frames) == 1, frames
    assert frames[0]["id"] is None and frames[0]["error"]["code"] == -32700


def test_duplicate_object_keys_are_a_parse_error(host):
    frames = answered_next(host, lambda: host.send_line(
        b'{"jsonrpc":"2.0","id":"d","method":"checkSignInStatus","params":{"provider":"c","provider":"s"}}'))
    assert len(frames) == 1, frames
    assert frames[0]["id"] is None and frames[0]["error"]["code"] == -32700, frames[0]


def test_crlf_line_ending_is_tolerated(host):
    host.sent[("str", "crlf")] = "listProviders"
    host.send_bytes(b'{"jsonrpc":"2.0","id":"crlf","method":"listProviders","params":{}}\r\n')
    response = host.wait_response("crlf")
    assert "plugins" in response["result"]


def test_blank_lines_are_ignored(host):
    frames = answered_next(host, lambda: host.send_bytes(b"\n   \n\t\n\r\n \t \r\n"))
    assert frames == [], f"blank lines were answered: {frames}"


def test_a_one_mebibyte_frame_is_answered(host):
    blob = "x" * (1 << 20)
    profile = host.result("configureProfile", {"name": "big", "plugin": "ctest",
                                               "settings": {"server": "https://big.example", "blob": blob}})
    assert profile["name"] == "big" and profile["status"] == "ready"
    error = host.error("checkSignInStatus", {"provider": "c", "padding": blob})
    assert error["code"] == -32602 and error["data"]["field"] == "padding"
    assert blob not in json.dumps(error)


def test_the_host_never_exits_on_bad_input(host):
    bad = [
        b"garbage", b"[]", b"[1,2]", b"{}", b"null", b"42", b'"text"', b"\xff\xff",
        b'{"jsonrpc":"2.0"}', b'{"id":"bad-1"}', b'{"jsonrpc":"2.0","id":[1],"method":"x"}',
        b'{"jsonrpc":"2.0","id":"bad-3","method":7}',
        b'{"jsonrpc":"2.0","id":"bad-4","method":"listProviders","params":5}',
        b'{"jsonrpc":"2.0","id":{"a":1},"method":"listProviders"}', b"{" * 5000, b"]" * 100,
        b'{"jsonrpc":"2.0","id":"bad-5","method":"' + b"m" * 10000 + b'"}',
    ]
    for line in bad:
        host.send_line(line)
    probe = host.request("listProviders", {})
    assert "result" in probe
    assert host.proc.poll() is None


# ── Messages ─────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("batch", [[], [{"jsonrpc": "2.0", "id": 77, "method": "listProviders"}],
                                   [{"jsonrpc": "2.0", "id": 78, "method": "listProviders"},
                                    {"jsonrpc": "2.0", "method": "initialized"}]],
                         ids=["empty", "one", "two"])
def test_batches_get_one_invalid_request_with_null_id_and_nothing_runs(host, batch):
    # Batch member ids are deliberately not tracked: an answer to one fails the test.
    raw = json.dumps(batch).encode()
    frames = answered_next(host, lambda: host.send_bytes(raw + b"\n"))
    assert len(frames) == 1, f"expected exactly one answer to the batch, got {frames}"
    assert frames[0]["id"] is None and frames[0]["error"]["code"] == -32600


def test_object_without_method_is_an_invalid_request(host):
    host.send_line(b'{"jsonrpc":"2.0","id":"nomethod","params":{}}')
    response = host.wait_response("nomethod")
    assert response["error"]["code"] == -32600


@pytest.mark.parametrize("version", ['"1.0"', "2.0", "2", "null", '"2.0 "'])
def test_jsonrpc_member_must_be_the_string_2_0_and_the_id_is_echoed(host, version):
    host.send_line(f'{{"jsonrpc":{version},"id":"v","method":"listProviders","params":{{}}}}')
    response = host.wait_response("v")
    assert response["error"]["code"] == -32600


def test_missing_jsonrpc_member_is_an_invalid_request(host):
    host.send_line(b'{"id":"nov","method":"listProviders","params":{}}')
    assert host.wait_response("nov")["error"]["code"] == -32600


@pytest.mark.parametrize("raw_id", ["null", "1.5", "-0.25", "1e-3", "9223372036854775808", "1e999", "true", '{"a":1}', "[1]",
                                    # Fractions a double cannot tell from an integer: 1e-999 reads as 0.0, the
                                    # others as 1.0 (issue 26: 1e-999 was answered as id 0, another request's id).
                                    "1e-999", "-1e-400", "1.0000000000000000001", "0.99999999999999999999"])
def test_ids_that_are_not_string_or_integer_are_refused_with_null_id(host, raw_id):
    frames = answered_next(host, lambda: host.send_line(
        f'{{"jsonrpc":"2.0","id":{raw_id},"method":"listProviders","params":{{}}}}'))
    assert len(frames) == 1, frames
    assert frames[0]["id"] is None, frames[0]
    assert frames[0]["error"]["code"] == -32600


@pytest.mark.parametrize("params", ['"text"', "5", "true", "null"])
def test_params_neither_object_nor_array_is_an_invalid_request(host, params):
    host.send_line(f'{{"jsonrpc":"2.0","id":"p","method":"listProviders","params":{params}}}')
    response = host.wait_response("p")
    assert response["error"]["code"] == -32600, response


def test_params_as_an_array_is_invalid_params_for_the_whole_params(host):
    response = host.request("checkSignInStatus", ["c"])
    assert response["error"]["code"] == -32602
    # README §3: "an array → -32602 (data.field: "params")".
    assert response["error"]["data"]["field"] == "params", response["error"]


def test_unknown_method_is_method_not_found_with_data_method(host):
    error = host.error("getTokens", {})
    assert error["code"] == -32601
    assert error["data"]["method"] == "getTokens"


def test_missing_required_param_names_the_field(host):
    error = host.error("checkSignInStatus", {})
    assert error["code"] == -32602
    assert error["data"]["field"] == "provider"


@pytest.mark.parametrize("method,params,field", [
    ("checkSignInStatus", {"provider": 5}, "provider"),
    ("checkSignInStatus", {"provider": ["c"]}, "provider"),
    ("getAccessToken", {"provider": "c", "minValidityMs": "soon"}, "minValidityMs"),
    ("getAccessToken", {"provider": "c", "minValidityMs": 1.5}, "minValidityMs"),
    ("requestOAuthTokens", {"provider": "c", "flow": "carrier-pigeon"}, "flow"),
    ("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": 12}, "sessionId"),
    ("configureProfile", {"name": "n", "plugin": "ctest", "settings": "server=x"}, "settings"),
    ("removeProfile", {"name": None}, "name"),
])
def test_ill_typed_param_names_the_field(host, method, params, field):
    error = host.error(method, params)
    assert error["code"] == -32602, error
    assert error["data"]["field"] == field, error


@pytest.mark.parametrize("method,params", [
    ("checkSignInStatus", {"provider": "c", "bogus": 1}),
    ("listProviders", {"bogus": 1}),
    ("getAccessToken", {"provider": "c", "bogus": None}),
    ("signOut", {"provider": "c", "bogus": "x"}),
])
def test_unknown_param_is_invalid_params_naming_it(host, method, params):
    error = host.error(method, params)
    assert error["code"] == -32602
    assert error["data"]["field"] == "bogus"


@pytest.mark.parametrize("frame", [
    {"jsonrpc": "2.0", "method": "no/such/method"},
    {"jsonrpc": "2.0", "method": "$/unknownNotification", "params": {"x": 1}},
    {"jsonrpc": "2.0", "method": "getAccessToken", "params": {"provider": "nope"}},
    {"jsonrpc": "2.0", "method": "checkSignInStatus", "params": ["c"]},
    {"jsonrpc": "2.0", "id": "client-response", "result": {"ok": True}},
    {"jsonrpc": "2.0", "id": 991, "error": {"code": -1, "message": "client error"}},
], ids=["unknown", "unknown-$", "method-name", "bad-params", "client-result", "client-error"])
def test_notifications_and_client_responses_are_never_answered(host, frame):
    frames = answered_next(host, lambda: host.send(frame))
    assert frames == [], f"{frame} was answered: {frames}"


def test_invalid_messages_without_id_are_answered_with_null_id(host):
    # README §3 / JSON-RPC 2.0 §5: a message that is not a valid Request object is answered
    # -32600 with id null, even without an id: the host cannot know it was meant as a notification.
    for line in (b'{"jsonrpc":"2.0","method":"listProviders","params":"text"}',
                 b'{"jsonrpc":"1.0","method":"initialized"}',
                 b'{"jsonrpc":"2.0","method":42}'):
        frames = answered_next(host, lambda: host.send_line(line))
        assert len(frames) == 1, f"{line!r} → {frames}"
        assert frames[0]["id"] is None
        assert frames[0]["error"]["code"] == -32600


@pytest.mark.parametrize("request_id", [
    0, 7, -12, 2**53 + 1, 2**63 - 1, "", "abc", "ключ-🔑", "id with \"quotes\" and \\", "7",
], ids=["zero", "int", "negative", "2^53+1", "int64-max", "empty", "ascii", "unicode", "escapes", "digit-string"])
def test_ids_are_echoed_exactly(host, request_id):
    response = host.request("listProviders", {}, id=request_id)
    assert response["id"] == request_id
    assert type(response["id"]) is type(request_id)


@pytest.mark.parametrize("raw_id,echoed", [("7.0", 7), ("1e9", 1_000_000_000), ("-2.0E1", -20), ("3.14e2", 314), ("-0.0", 0),
                                           ("1e18", 10**18), ("12345678901234567.0", 12345678901234567)])
def test_ids_with_a_zero_fraction_are_integers_and_answered_as_such(host, raw_id, echoed):
    # JSON Schema 2020-12 (the spec's dialect): 7.0 and 1e3 are integers, so they are RequestIds.
    host.sent[("int", echoed)] = "listProviders"
    host.send_bytes(f'{{"jsonrpc":"2.0","id":{raw_id},"method":"listProviders"}}\n'.encode())
    response = host.wait_response(echoed)
    assert "result" in response and response["id"] == echoed and type(response["id"]) is int


def test_ids_are_echoed_exactly_on_errors(host):
    for request_id in (2**53 + 1, "ключ"):
        response = host.request("checkSignInStatus", {"provider": "nope"}, id=request_id)
        assert response["id"] == request_id and type(response["id"]) is type(request_id)
        assert "error" in response


def test_integer_and_string_ids_are_distinct(host):
    slow = host.send_request("requestOAuthTokens", SLOW, id=5)
    try:
        response = host.request("listProviders", {}, id="5")
        assert "result" in response, f"id \"5\" was taken for the running id 5: {response}"
    finally:
        host.notify("$/cancelRequest", {"id": 5})
    assert host.wait_response(slow)["error"]["code"] == -32800


# ── Concurrency and cancellation ─────────────────────────────────────────────


def test_responses_go_out_of_order(host):
    slow = host.send_request("requestOAuthTokens", SLOW)
    fast = host.send_request("listProviders", {})
    fast_answer = host.wait_response(fast)
    assert "result" in fast_answer
    with host.cond:
        assert not any(f.get("id") == slow for f in host.frames if "method" not in f), \
            "the slow request was answered before the fast one"
    host.notify("$/cancelRequest", {"id": slow})
    assert host.wait_response(slow)["error"]["code"] == -32800


@pytest.mark.parametrize("provider", ["c", "s"])
def test_cancel_request_answers_request_cancelled_and_host_keeps_serving(host, provider):
    slow = host.send_request("requestOAuthTokens", {**SLOW, "provider": provider}, id=f"slow-{provider}")
    host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == slow and p["stage"] == "exchanging")
    host.notify("$/cancelRequest", {"id": slow})
    answer = host.wait_response(slow)
    assert answer["error"]["code"] == -32800
    assert "result" in host.request("listProviders", {})
    # Nothing was signed in by the cancelled request.
    assert host.result("checkSignInStatus", {"provider": provider})["state"] == "notSignedIn"


def test_cancelling_a_pending_external_sign_in(host):
    pending, _ = begin_sign_in(host, "s", flow="external")
    host.notify("$/cancelRequest", {"id": pending})
    assert host.wait_response(pending)["error"]["code"] == -32800
    error = host.error("completeSignIn", {"provider": "s",
                                          "callbackUrl": "https://swifttest.example/done?session_token=S&access_token=A"})
    assert error["code"] == -32012


@pytest.mark.parametrize("params", [{"id": 424242}, {"id": "nobody"}, {"id": None}, {}, {"id": 1.5}],
                         ids=["unknown-int", "unknown-string", "null", "missing", "float"])
def test_cancelling_an_unknown_id_is_harmless(host, params):
    frames = answered_next(host, lambda: host.notify("$/cancelRequest", params))
    assert frames == [], frames


def test_a_cancel_whose_id_is_a_fraction_cancels_nothing(host):
    # 1e-999 is a fraction, though a double reads it as 0: it must not cancel request 0.
    host.send_line(b'{"jsonrpc":"2.0","id":0,"method":"requestOAuthTokens","params":{"provider":"c","flow":"session","sessionId":"slow"}}')
    frames = answered_next(host, lambda: host.send_line(b'{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1e-999}}'))
    # Request 0's own progress may arrive meanwhile (a notification); no answer may.
    assert [f for f in frames if "id" in f] == [], frames
    host.send_line(b'{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":0.0}}')
    assert host.wait_response(0)["error"]["code"] == -32800


def test_cancelling_a_finished_request_keeps_its_answer(host):
    first = host.request("listProviders", {}, id="done")
    host.notify("$/cancelRequest", {"id": "done"})
    assert "result" in first
    assert "result" in host.request("listProviders", {})


def test_duplicate_in_flight_id_is_an_invalid_request(host):
    host.expected_duplicate_ids.add(("str", "dup"))
    host.send_request("requestOAuthTokens", SLOW, id="dup")
    host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == "dup")
    duplicate = host.request("listProviders", {}, id="dup")
    assert duplicate["error"]["code"] == -32600, short(duplicate)
    host.notify("$/cancelRequest", {"id": "dup"})
    assert host.wait_response("dup")["error"]["code"] == -32800
    # Once the first has finished, the id may be used again.
    assert "result" in host.request("listProviders", {}, id="dup-2")


# ── Valid JSON is always answered (issue 12 §1) ─────────────────────────────


# A number no int64 (or, for the last three, no double) holds, in a typed member; a number beyond a double is
# refused wherever it is, even deep in free-form settings.
@pytest.mark.parametrize("method, params, field", [
    *[("getAccessToken", f'{{"provider":"c","minValidityMs":{number}}}', "minValidityMs")
      for number in ["9223372036854775808", "-9223372036854775809", "18446744073709551616", "1" + "0" * 40,
                     "1e999", "-1e999", "1.7976931348623157e309"]],
    *[("configureProfile", f'{{"name":"n","plugin":"ctest","settings":{{"server":"https://x.example","limits":[1,{number}]}}}}',
       "settings.limits[1]") for number in ["1e999", "-1e999"]],
])
def test_a_number_out_of_range_in_params_is_invalid_params_naming_it(host, method, params, field):
    # RFC 8259 sets no range: the frame is valid JSON, so its id is read and echoed.
    host.sent[("str", "big")] = method
    host.send_line(f'{{"jsonrpc":"2.0","id":"big","method":"{method}","params":{params}}}')
    error = host.wait_response("big")["error"]
    assert error["code"] == -32602 and error["data"]["field"] == field, error


def test_an_integer_beyond_64_bits_in_free_form_settings_is_kept_as_a_number(host):
    # RFC 8259 §6: a receiver may read it approximately; the request is not refused for it.
    host.sent[("str", "wide")] = "configureProfile"
    host.send_line('{"jsonrpc":"2.0","id":"wide","method":"configureProfile","params":'
                   '{"name":"wide","plugin":"ctest","settings":{"server":"https://x.example","limit":99999999999999999999999}}}')
    assert host.wait_response("wide")["result"]["status"] == "ready"


def test_an_out_of_range_number_in_an_unknown_member_names_that_member(host):
    host.sent[("int", 77)] = "checkSignInStatus"
    host.send_line('{"jsonrpc":"2.0","id":77,"method":"checkSignInStatus","params":{"provider":"c","zz":1e999}}')
    error = host.wait_response(77)["error"]
    assert error["code"] == -32602 and error["data"]["field"] == "zz", error


def test_numbers_with_a_zero_fraction_are_integers(host):
    # JSON Schema 2020-12: 1000.0 and 1e3 are integers wherever the spec asks for one.
    sign_in_session(host, "c", "zero-fraction")
    for raw in ("1000.0", "1e3", "6E4"):
        host.sent[("str", raw)] = "getAccessToken"
        host.send_line(f'{{"jsonrpc":"2.0","id":"{raw}","method":"getAccessToken",'
                       f'"params":{{"provider":"c","minValidityMs":{raw}}}}}')
        assert "result" in host.wait_response(raw), raw
    error = host.error("getAccessToken", {"provider": "c", "minValidityMs": 1000.5})
    assert error["code"] == -32602 and error["data"]["field"] == "minValidityMs"


def test_a_request_nested_deeper_than_the_parser_goes_is_answered_with_its_id(host):
    depth = 3000
    host.sent[("str", "deep")] = "configureProfile"
    host.send_bytes(b'{"jsonrpc":"2.0","id":"deep","method":"configureProfile","params":{"name":"d","plugin":"ctest",'
                    b'"settings":{"x":' + b"[" * depth + b"]" * depth + b'}}}\n')
    error = host.wait_response("deep")["error"]
    assert error["code"] == -32600, error
    assert "result" in host.request("listProviders", {})


# ── Params are checked against the spec's schemas (issue 12 §1, §5) ──────────


@pytest.mark.parametrize("method,params,field", [
    ("listAccounts", {"provider": ""}, "provider"),
    ("checkSignInStatus", {"provider": ""}, "provider"),
    ("listAccounts", {"provider": 5}, "provider"),
    ("listAccounts", {"provider": None}, "provider"),
    ("checkSignInStatus", {"provider": "c", "account": None}, "account"),
    ("checkSignInStatus", {"provider": "c", "account": ""}, "account"),
    ("getAccessToken", {"provider": "c", "forceRefresh": None}, "forceRefresh"),
    ("getAccessToken", {"provider": "c", "minValidityMs": None}, "minValidityMs"),
    ("requestOAuthTokens", {"provider": "c", "flow": "external", "redirectUri": ""}, "redirectUri"),
    ("requestOAuthTokens", {"provider": "c", "flow": "external", "loginHint": ""}, "loginHint"),
    ("requestOAuthTokens", {"provider": "c", "flow": "external", "scopes": ["openid", ""]}, "scopes[1]"),
    ("requestOAuthTokens", {"provider": "c", "flow": None}, "flow"),
    ("requestOAuthTokens", {"provider": "c", "flow": "session"}, "sessionId"),
    ("requestOAuthTokens", {"provider": "c", "timeoutMs": 999}, "timeoutMs"),
    ("completeSignIn", {"provider": "c", "callbackUrl": ""}, "callbackUrl"),
    ("configureProfile", {"name": "n", "plugin": "not a plugin id!"}, "plugin"),
    ("configureProfile", {"name": "n", "plugin": "ctest", "settings": None}, "settings"),
    ("fetch", {"provider": "c", "url": "/x", "method": "get"}, "method"),
    ("fetch", {"provider": "c", "url": "/x", "headers": {"Bad Name": "v"}}, "headers.Bad Name"),
    ("fetch", {"provider": "c", "url": "/x", "headers": {"Accept": 1}}, "headers.Accept"),
    ("fetch", {"provider": "c", "url": "/x", "body": None}, "body"),
    ("shutdown", {"bogus": 1}, "bogus"),
    ("rpc.discover", {"bogus": 1}, "bogus"),
    ("listProviders", {"bogus": None}, "bogus"),
])
def test_params_the_spec_calls_invalid_are_invalid_params(host, method, params, field):
    error = host.error(method, params)
    assert error["code"] == -32602, error
    assert error["data"]["field"] == field, error
    # The host kept serving (and a refused shutdown did not start shutting down).
    assert "result" in host.request("listProviders", {})


def test_initialize_ignores_unknown_members_but_checks_the_known_ones(start_host, plugin_dir):
    host = start_host([plugin_dir], profiles={}, initialize=False)
    error = host.error("initialize", {"protocolVersion": "1.0", "clientInfo": {"version": "1"}})
    assert error["code"] == -32602 and error["data"]["field"] == "clientInfo.name", error
    error = host.error("initialize", {"protocolVersion": "1.0", "capabilities": []})
    assert error["code"] == -32602 and error["data"]["field"] == "capabilities", error
    result = host.result("initialize", {"protocolVersion": "1.0", "clientInfo": {"name": "x", "extra": True},
                                        "someFutureMember": {"a": 1}})
    assert result["protocolVersion"] == "1.0"


# ── Plugin failures are held to the spec (issue 12 §1) ────────────────────────


def test_a_plugin_failure_whose_reason_is_not_a_word_is_a_plugin_error(host):
    error = host.error("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "bad-reason"})
    assert error["code"] == -32008 and error["data"]["reason"] == "pluginError", error
    assert error["message"]


def test_a_plugin_failure_without_a_message_gets_one(host):
    error = host.error("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "no-message"})
    assert error["code"] == -32004 and error["data"]["reason"] == "refusedQuietly", error
    assert error["message"].strip(), error


# ── Cancellation, duplicates and arrival order (issue 12 §1) ─────────────────


def test_cancel_and_exit_are_read_while_every_request_slot_is_busy(host):
    # 256 requests run at once; what arrives meanwhile waits, but the reader goes on reading.
    slow = [host.send_request("requestOAuthTokens", SLOW, id=f"busy-{n}") for n in range(260)]
    host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == "busy-255" and p["stage"] == "exchanging",
                               timeout=30)
    host.notify("$/cancelRequest", {"id": "busy-259"})   # still waiting for a slot: answered at once
    assert host.wait_response("busy-259")["error"]["code"] == -32800
    host.notify("$/cancelRequest", {"id": "busy-3"})     # running: cancelled
    assert host.wait_response("busy-3")["error"]["code"] == -32800
    host.send_request("shutdown", None, id="bye")
    host.notify("exit")
    assert host.wait_exit(timeout=20) == 0
    for request_id in slow:
        if request_id not in ("busy-259", "busy-3"):
            assert host.wait_response(request_id)["error"]["code"] == -32800


def test_a_duplicate_id_never_costs_the_first_request_its_answer(host):
    host.expected_duplicate_ids.add(("str", "twice"))
    first = host.send_request("requestOAuthTokens", {"provider": "c", "flow": "external", "timeoutMs": 2000}, id="twice")
    host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == first)
    # A duplicate shutdown must not start shutting the host down either.
    for method in ("requestOAuthTokens", "shutdown", "listProviders"):
        duplicate = host.request(method, {"provider": "c", "flow": "external"} if method == "requestOAuthTokens" else None,
                                 id="twice")
        assert duplicate["error"]["code"] == -32600, duplicate
    answer = host.wait_response("twice", timeout=10)
    assert answer["error"]["code"] == -32006, answer    # the first one's own end: its 2 s timeout
    assert "result" in host.request("listProviders", {})


def test_the_newer_of_two_sign_ins_written_at_once_is_the_one_that_stays(host):
    for round in range(20):
        older, newer = f"older-{round}", f"newer-{round}"
        host.send_lines([json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "requestOAuthTokens",
                                     "params": {"provider": "c", "flow": "external"}}) for request_id in (older, newer)])
        answer = host.wait_response(older)
        assert answer["error"]["code"] == -32005 and answer["error"]["data"]["reason"] == "superseded", answer
        host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == newer and p["stage"] == "openUrl")
        host.notify("$/cancelRequest", {"id": newer})
        assert host.wait_response(newer)["error"]["code"] == -32800


# ── A frontend that does not read (issue 12 §1) ───────────────────────────────


def _peak_rss_kib(pid, stopped, peak):
    """Samples the host's VmHWM until `stopped` (wait4's ru_maxrss would also count this
    process's own memory: Popen starts children with vfork)."""
    while True:
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        peak[0] = max(peak[0], int(line.split()[1]))
        except (OSError, ValueError):
            pass
        if stopped.wait(0.02):
            return


def _wait_with_rusage(proc, timeout):
    """(exit code, peak RSS in KiB) of a child, or (None, None) when it is still running after `timeout`."""
    outcome = {}
    stopped, peak = threading.Event(), [0]
    sampler = threading.Thread(target=_peak_rss_kib, args=(proc.pid, stopped, peak), daemon=True)
    sampler.start()

    def reap():
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)   # exited, still readable in /proc
        stopped.set()
        sampler.join()
        _, status, _ = os.wait4(proc.pid, 0)
        outcome["code"] = os.waitstatus_to_exitcode(status)
        outcome["rss"] = peak[0]

    waiter = threading.Thread(target=reap, daemon=True)
    waiter.start()
    waiter.join(timeout)
    if waiter.is_alive():
        return None, None
    proc.returncode = outcome["code"]
    return outcome["code"], outcome["rss"]


@pytest.mark.parametrize("ending", ["exit", "eof"])
def test_a_frontend_that_never_reads_neither_grows_the_host_nor_keeps_it_alive(tmp_path, plugin_dir, ending):
    argv, env = host_command(tmp_path / "host", [plugin_dir], profiles=DEFAULT_PROFILES, log_level="warning")
    stderr = open(tmp_path / "stderr.log", "wb")
    # Nobody ever reads this host's stdout.
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, bufsize=0)
    try:
        # ~1.4 KiB answers to 4.5 MiB of requests: about 80 MiB of output.
        line = b'{"jsonrpc":"2.0","method":"listProviders","id":%d}\n'
        data = b'{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":"1.0"}}\n'
        data += b"".join(line % n for n in range(60_000))
        if ending == "exit":
            data += b'{"jsonrpc":"2.0","id":"bye","method":"shutdown"}\n{"jsonrpc":"2.0","method":"exit"}\n'

        def write():
            proc.stdin.write(data)
            if ending == "eof":
                proc.stdin.close()

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        writer.join(60)
        assert not writer.is_alive(), "the host stopped reading its input before the end"
        code, peak_kib = _wait_with_rusage(proc, 30)
        assert code is not None, "the host did not exit while nobody read its output"
        assert code == 0
        assert peak_kib < 160 * 1024, f"the host grew to {peak_kib // 1024} MiB while its output was not read"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        stderr.close()
