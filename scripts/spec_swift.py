"""The bridge's messages as Swift types, written from bridge-spec/openrpc.json (scripts/spec.py).

One struct per method's params (conforming to `BridgeRequest`, naming the method and its result
type) and per notification's params (`BridgeNotification`), one per object the results are made
of, and an enum per closed set of words (states, flows, stages): what sourcekit-lsp's
LanguageServerProtocol module is to LSP. The host decodes a request's params into its struct once
(after the spec's schema check), the engine takes and returns these types, the command line reads
their fields. What the schemas leave open stays `JSON` (a plugin's settings, details); the two
shapes of a plugin's status are written by the plugin host and stay `JSON` too.
"""
from __future__ import annotations

import keyword
import re

# Schemas that are not messages (the envelope, the error object, the ABI) or whose shape stays open.
SKIPPED = {"Envelope", "ErrorObject", "ErrorData", "PluginABI"}
KEPT_AS_JSON = {"PluginStatus", "OpenRPCDocument", "JSONSchema", "RequestId"}
# Members of these types are carried as JSON (the plugin host writes them, with members of its own
# the spec allows), but a type is written to read one: `PluginStatus(wire:)`.
READ_ONLY_TYPES = {"PluginStatus"}
# Swift names where the word alone would mislead: `.none` reads as Optional's.
CASE_NAMES = {("StorageInfo.Protection", "none"): "unprotected"}
NESTED_NAMES = {("ServerCapabilities", "notifications"): "NotificationMethod", ("FetchParams", "method"): "HTTPMethod"}
SWIFT_KEYWORDS = {"default", "protocol", "extension", "import", "internal", "operator", "private", "public", "return",
                  "static", "struct", "subscript", "super", "switch", "throw", "throws", "true", "false", "nil", "var",
                  "let", "func", "init", "in", "is", "as", "case", "class", "enum", "for", "if", "else", "where",
                  "while", "repeat", "self", "Self", "Type", "guard", "defer", "do", "catch", "try", "break",
                  "continue", "fallthrough", "inout", "associatedtype", "typealias", "deinit", "rethrows"}
WIDTH = 150


def component(ref: str) -> str | None:
    prefix = "#/components/schemas/"
    return ref[len(prefix):] if ref.startswith(prefix) else None


def swift_identifier(name: str) -> str:
    return f"`{name}`" if name in SWIFT_KEYWORDS or keyword.iskeyword(name) else name


def case_name(owner: str, word: str) -> str:
    if (owner, word) in CASE_NAMES:
        return CASE_NAMES[(owner, word)]
    parts = [p for p in re.split(r"[^A-Za-z0-9]+", word) if p]
    if word.isupper():
        return word.lower()
    name = parts[0][0].lower() + parts[0][1:] + "".join(p[0].upper() + p[1:] for p in parts[1:])
    return swift_identifier(name)


def first_sentence(text: str) -> str:
    text = " ".join(text.split())
    match = re.match(r"(.+?(?<!e\.g)(?<!i\.e)[.!?])(\s+[A-Z`(]|$)", text)
    return match.group(1) if match else text


def doc_lines(text: str, indent: str) -> list[str]:
    if not text:
        return []
    lines, line = [], f"{indent}///"
    for word in text.split():
        if len(line) + 1 + len(word) > WIDTH - 10 and line != f"{indent}///":
            lines.append(line)
            line = f"{indent}///"
        line += " " + word
    return lines + [line]


class Generator:
    def __init__(self, document: dict):
        self.document = document
        self.schemas = document["components"]["schemas"]
        self.blocks: list[str] = []
        self.written: set[str] = set()

    # ── Types ────────────────────────────────────────────────────────────────

    def nullable_parts(self, schema: dict) -> tuple[dict, bool]:
        """The schema without its `null` alternative, and whether it had one."""
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and any(o.get("type") == "null" for o in options):
                rest = [o for o in options if o.get("type") != "null"]
                if len(rest) == 1:
                    return rest[0], True
        kinds = schema.get("type")
        if isinstance(kinds, list) and "null" in kinds:
            rest = [k for k in kinds if k != "null"]
            if len(rest) == 1:
                return {**schema, "type": rest[0]}, True
        return schema, False

    def swift_type(self, schema: dict, owner: str, member: str) -> str:
        """The Swift type of `schema`, writing the types it needs; `owner.member` names nested ones."""
        if "allOf" in schema and "$ref" in schema["allOf"][0]:
            return self.swift_type(schema["allOf"][0], owner, member)
        if "$ref" in schema:
            return self.named_type(component(schema["$ref"]))
        kinds = schema.get("type")
        if "enum" in schema and all(isinstance(v, str) for v in schema["enum"]):
            name = NESTED_NAMES.get((owner, member)) or member[0].upper() + member[1:]
            self.enum_block(f"{owner}.{name}", schema["enum"], schema.get("description", ""), nested_in=owner)
            return f"{owner}.{name}"
        if kinds == "array":
            return f"[{self.swift_type(schema.get('items', {}), owner, member)}]"
        if kinds == "object":
            if schema.get("properties"):
                name = member[0].upper() + member[1:]
                self.struct_block(f"{owner}.{name}", schema, nested_in=owner)
                return f"{owner}.{name}"
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict) and extra.get("type") == "string":
                return "[String: String]"
            return "[String: JSON]"
        return {"string": "String", "integer": "Int64", "boolean": "Bool", "number": "Double"}.get(kinds, "JSON")

    def named_type(self, name: str) -> str:
        schema = self.schemas[name]
        if name in KEPT_AS_JSON:
            return "JSON"
        if "enum" in schema and schema.get("type") == "string":
            self.enum_block(name, schema["enum"], schema.get("description", ""))
            return name
        if schema.get("type") == "object" and "properties" in schema:
            self.struct_block(name, schema)
            return name
        return self.swift_type(schema, name, name)

    # ── Blocks ───────────────────────────────────────────────────────────────

    def enum_block(self, name: str, words: list[str], description: str, nested_in: str | None = None) -> None:
        if name in self.written:
            return
        self.written.add(name)
        short = name.split(".")[-1]
        lines = doc_lines(first_sentence(description) or f"The words of `{name}` on the wire.", "")
        lines.append(f"public enum {short}: String, WireWord {{")
        for word in words:
            swift = case_name(name, word)
            lines.append(f"    case {swift}" + ("" if swift == word else f' = "{word}"'))
        lines.append("}")
        self.add(lines, nested_in)

    def reserve(self) -> int:
        """A place for a type whose members name types of their own: it goes before them."""
        self.blocks.append("")
        return len(self.blocks) - 1

    def add(self, lines: list[str], nested_in: str | None, slot: int | None = None) -> None:
        if nested_in:
            lines = [f"extension {nested_in} {{"] + ["    " + line if line else line for line in lines] + ["}"]
        if slot is None:
            self.blocks.append("\n".join(lines))
        else:
            self.blocks[slot] = "\n".join(lines)

    def struct_block(self, name: str, schema: dict, conformance: str = "WireCodable", members_of_type: list[str] | None = None,
                     nested_in: str | None = None) -> None:
        if name in self.written:
            return
        self.written.add(name)
        slot = self.reserve()
        short = name.split(".")[-1]
        required = set(schema.get("required", []))
        fields = []  # (wire name, swift name, type, kind, const, default, description)
        for wire_name, member in schema.get("properties", {}).items():
            swift = swift_identifier(wire_name)
            description = first_sentence(member.get("description", ""))
            if "const" in member:
                fields.append((wire_name, swift, None, "const", member["const"], None, description))
                continue
            inner, nullable = self.nullable_parts(member)
            kind_type = self.swift_type(inner, name, wire_name)
            default = member.get("default")
            if wire_name in required:
                kind = "requiredNullable" if nullable else "required"
            elif default is not None and kind_type in ("Bool", "String", "Int64") or (default is not None and "." in kind_type):
                kind = "defaulted"
            else:
                kind = "optional"
            fields.append((wire_name, swift, kind_type, kind, None, default, description))
        lines = doc_lines(first_sentence(schema.get("description", "")) or f"bridge-spec's `{short}`.", "")
        lines.append(f"public struct {short}: {conformance} {{")
        lines += members_of_type or []
        stored = [f for f in fields if f[3] != "const"]
        for wire_name, swift, swift_type, kind, _, default, description in stored:
            lines += doc_lines(description, "    ")
            optional = "?" if kind in ("optional", "requiredNullable") else ""
            lines.append(f"    public var {swift}: {swift_type}{optional}")
        # Memberwise initializer.
        arguments = []
        for wire_name, swift, swift_type, kind, _, default, _ in stored:
            if kind == "defaulted":
                arguments.append(f"{swift}: {swift_type} = {self.literal(default, swift_type)}")
            elif kind in ("optional", "requiredNullable"):
                arguments.append(f"{swift}: {swift_type}? = nil")
            else:
                arguments.append(f"{swift}: {swift_type}")
        lines.append("")
        lines += self.wrapped_signature("    public init(", arguments, ") {")
        for _, swift, *_ in stored:
            lines.append(f"        self.{swift.strip('`')} = {swift}")
        lines.append("    }")
        # Reading.
        lines.append("")
        lines.append("    public init(wire: JSON) throws(WireError) {")
        if stored:
            lines.append("        let object = try WireObject(wire)")
        elif schema.get("additionalProperties") is False or not schema.get("properties"):
            lines.append("        _ = try WireObject(wire)")
        for wire_name, swift, swift_type, kind, _, default, _ in stored:
            target = f"self.{swift.strip('`')}"
            if kind == "required":
                lines.append(f'        {target} = try object.required("{wire_name}")')
            elif kind == "requiredNullable":
                lines.append(f'        {target} = try object.required("{wire_name}") as {swift_type}?')
            elif kind == "defaulted":
                lines.append(f'        {target} = try object.optional("{wire_name}") ?? {self.literal(default, swift_type)}')
            else:
                lines.append(f'        {target} = try object.optional("{wire_name}")')
        lines.append("    }")
        # Writing.
        lines.append("")
        lines.append("    public var wire: JSON {")
        always = [f for f in fields if f[3] in ("required", "requiredNullable", "defaulted", "const")]
        sometimes = [f for f in fields if f[3] == "optional"]
        entries = []
        for wire_name, swift, _, kind, const, _, _ in always:
            value = self.const_literal(const) if kind == "const" else f"{swift}.wire"
            entries.append(f'"{wire_name}": {value}')
        keyword_ = "var" if sometimes else "let"
        if not sometimes:
            lines += self.wrapped_signature("        .object([", entries, "])", empty="        .object([:])")
        else:
            lines += self.wrapped_signature(f"        {keyword_} members: [String: JSON] = [", entries, "]",
                                            empty=f"        {keyword_} members: [String: JSON] = [:]")
            for wire_name, swift, *_ in sometimes:
                lines.append(f'        if let {swift} {{ members["{wire_name}"] = {swift}.wire }}')
            lines.append("        return .object(members)")
        lines.append("    }")
        lines.append("}")
        self.add(lines, nested_in, slot)
        self.reason_words(name, schema)

    def reason_words(self, name: str, schema: dict) -> None:
        """The words of `reason` the schema's per-state conditions name: an enum of a closed set
        (`SessionChangedParams.SignedOutReason`), or — where a state's reason is open (any word, a
        provider's own) — the known words as constants of an open set (`SignInStatus.Reason`)."""
        branches = []
        for condition in schema.get("allOf", []):
            state = condition.get("if", {}).get("properties", {}).get("state", {}).get("const")
            reason = condition.get("then", {}).get("properties", {}).get("reason")
            if state is not None and reason is not None:
                branches.append((state, reason))
        if not branches:
            return
        if any("anyOf" in reason or "$ref" in reason for _, reason in branches):
            words: list[str] = []
            for _, reason in branches:
                for word in reason.get("enum", []) + [reason.get("const")] + reason.get("examples", []):
                    if word is not None and word not in words:
                        words.append(word)
            lines = [f"/// The reasons bridge-spec names for a `{name}`'s states. An open set: a state may carry",
                     "/// another word (a provider's own refusal, camelCased).",
                     "public struct Reason: RawRepresentable, Hashable, Sendable {",
                     "    public let rawValue: String", "", "    public init(rawValue: String) { self.rawValue = rawValue }", ""]
            lines += [f'    public static let {case_name(name, w)} = Reason(rawValue: "{w}")' for w in words]
            self.add(lines + ["}"], name)
            return
        for state, reason in branches:
            if len(reason.get("enum", [])) > 1:
                enum = f"{name}.{state[0].upper() + state[1:]}Reason"
                self.enum_block(enum, reason["enum"], f"Why a `{name}` is `{state}`: the spec's closed set.", nested_in=name)

    @staticmethod
    def wrapped_signature(head: str, items: list[str], tail: str, empty: str | None = None) -> list[str]:
        if not items and empty is not None:
            return [empty]
        one_line = head + ", ".join(items) + tail
        if len(one_line) <= WIDTH:
            return [one_line]
        indent = " " * (len(head) - len(head.lstrip()) + 4)
        lines, line = [head.rstrip()], indent
        for index, item in enumerate(items):
            piece = item + ("," if index < len(items) - 1 or tail.startswith(("]", "])")) else "")
            if len(line) + len(piece) + 1 > WIDTH and line.strip():
                lines.append(line.rstrip())
                line = indent
            line += piece + " "
        lines.append(line.rstrip())
        lines.append(" " * (len(head) - len(head.lstrip())) + tail.lstrip())
        return lines

    @staticmethod
    def literal(value, swift_type: str) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str):
            return f".{case_name(swift_type, value)}" if "." in swift_type or swift_type[0].isupper() and swift_type != "String" else f'"{value}"'
        return str(value)

    @staticmethod
    def const_literal(value) -> str:
        if isinstance(value, bool):
            return ".bool(true)" if value else ".bool(false)"
        if isinstance(value, str):
            return f'.string("{value}")'
        return f".int({value})"

    # ── Methods ──────────────────────────────────────────────────────────────

    def methods(self) -> None:
        for method in self.document["methods"]:
            params = component(method["x-params"]["$ref"])
            result = method.get("result")
            notification = result is None
            if notification:
                members = [f'    public static let method = "{method["name"]}"', ""]
                conformance = "BridgeNotification"
            else:
                schema = result["schema"]
                result_type = self.named_type(component(schema["$ref"])) if "$ref" in schema else "JSON"
                members = [f'    public static let method = "{method["name"]}"', f"    public typealias Result = {result_type}", ""]
                conformance = "BridgeRequest"
            summary = method.get("summary") or first_sentence(method.get("description", ""))
            name = method["name"]
            described = {**self.schemas[params], "description": f"The params of `{name}`: {summary[0].lower() + summary[1:]}"}
            self.struct_block(params, described, conformance, members)

    def method_table(self) -> None:
        requests, notifications = [], []
        for method in self.document["methods"]:
            entry = f'"{method["name"]}": {component(method["x-params"]["$ref"])}.self'
            (notifications if method.get("result") is None else requests).append(entry)
        lines = ["/// Every method of bridge-spec by name, with the type of its params (as sourcekit-lsp's", "/// `builtinRequests`).",
                 "public enum BridgeMethods {", "    /// The methods a client calls."]
        lines += self.wrapped_signature("    public static let requests: [String: any BridgeRequest.Type] = [", requests, "]")
        lines += ["", "    /// The notifications either side sends."]
        lines += self.wrapped_signature("    public static let notifications: [String: any BridgeNotification.Type] = [", notifications, "]")
        self.blocks.append("\n".join(lines + ["}"]))

    def tagged_union(self, name: str, schema: dict) -> None:
        """A `oneOf` of objects told apart by a constant member (PluginStatus's `status`): an enum
        with a case, and a struct, per alternative."""
        self.written.add(name)
        slot = self.reserve()
        alternatives = []
        for option in schema["oneOf"]:
            tag, word = next((member, value["const"]) for member, value in option["properties"].items() if "const" in value)
            case = case_name(name, word)
            self.struct_block(f"{name}.{case[0].upper() + case[1:]}", {**option, "description": option.get("title", "")}, nested_in=name)
            alternatives.append((tag, word, case, case[0].upper() + case[1:]))
        tag = alternatives[0][0]
        words = ", ".join(f'\\"{word}\\"' for _, word, _, _ in alternatives)
        lines = doc_lines(first_sentence(schema.get("description", "")) or f"bridge-spec's `{name}`.", "")
        lines.append(f"public enum {name}: WireCodable {{")
        lines += [f"    case {case}({name}.{type_name})" for _, _, case, type_name in alternatives]
        lines += ["", "    public init(wire: JSON) throws(WireError) {", f'        switch wire["{tag}"]?.stringValue {{']
        for _, word, case, type_name in alternatives:
            lines.append(f'        case "{word}": self = .{case}(try {type_name}(wire: wire))')
        lines += [f'        default: throw WireError(field: "{tag}", "must be one of {words}")', "        }", "    }", "",
                  "    public var wire: JSON {", "        switch self {"]
        lines += [f"        case .{case}(let value): value.wire" for _, _, case, _ in alternatives]
        lines += ["        }", "    }", "}"]
        self.blocks[slot] = "\n".join(lines)

    def source(self) -> str:
        self.method_table()
        self.methods()
        for name in sorted(READ_ONLY_TYPES):
            self.tagged_union(name, self.schemas[name])
        for name in self.schemas:
            if name not in SKIPPED and name not in KEPT_AS_JSON and name not in self.written:
                self.named_type(name)
        head = ("// Generated by scripts/spec.py (`make spec`) from bridge-spec/openrpc.json. Do not edit.\n"
                "// swift-format-ignore-file\n\n"
                "import AuthBridgeJSON\n")
        return head + "\n" + "\n\n".join(self.blocks) + "\n"


def swift_messages(document: dict) -> str:
    return Generator(document).source()
