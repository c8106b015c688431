// The host process and its byte streams: spawning `authbridge serve`, cutting its stdout into
// lines (NDJSON, bridge-spec §1), writing lines to its stdin, draining its stderr, and telling
// when and how it ended; or a connection to the running `authbridge agent` on its Unix socket,
// with the same interface. Nothing here knows JSON-RPC; the client (client.js) does.

import { spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { connect as connectSocket } from 'node:net';
import { lstat } from 'node:fs/promises';
import { dirname, isAbsolute, join, resolve } from 'node:path';

/** The longest line the host may write (bridge-spec §1): 64 MiB. */
export const MAX_LINE_BYTES = 64 * 1024 * 1024;

const NEWLINE = 0x0a;
const CARRIAGE_RETURN = 0x0d;

/**
 * Cuts a byte stream into text lines.
 *
 * Why not readline: a frame may be split across any number of chunks (the pipe delivers 64 KiB
 * at a time, `rpc.discover` is ~100 KB), a chunk may end inside a multi-byte UTF-8 character, and
 * a line must be bounded so a broken peer cannot grow memory without limit. Chunks are kept as
 * they come and joined once per line, so a large frame costs one copy, not one per chunk; each
 * chunk is scanned for a newline once. A trailing `\r` is dropped and blank lines are skipped,
 * as the spec allows.
 */
export class LineDecoder {
  /**
   * @param {(line: string) => void} onLine called with each complete line (without `\n`)
   * @param {{maxLineBytes?: number, onOverflow?: (bytes: number) => void, onPartial?: (bytes: number) => void}} [options]
   *   onOverflow is called once per line longer than maxLineBytes; that line is discarded up
   *   to its `\n` and decoding goes on after it. onPartial is called at the end of the stream
   *   when a last line has no `\n` (the writer stopped mid-frame); that line is discarded.
   */
  constructor(onLine, { maxLineBytes = MAX_LINE_BYTES, onOverflow = () => {}, onPartial = () => {} } = {}) {
    this.onLine = onLine;
    this.maxLineBytes = maxLineBytes;
    this.onOverflow = onOverflow;
    this.onPartial = onPartial;
    this.parts = [];        // Buffers of the current, unfinished line
    this.partBytes = 0;
    this.discarding = false; // inside an over-long line: drop bytes up to the next \n
    this.discarded = 0;
  }

  /** Feeds one chunk. */
  push(chunk) {
    let start = 0;
    while (start < chunk.length) {
      const end = chunk.indexOf(NEWLINE, start);
      if (end === -1) {
        this.#append(chunk.subarray(start));
        return;
      }
      this.#append(chunk.subarray(start, end));
      this.#finishLine();
      start = end + 1;
    }
  }

  /**
   * The stream ended. A last line without `\n` is not a frame (bridge-spec §1: each ends with
   * one, and the host writes frames whole): a host that died mid-write left it, e.g. part of a
   * getAccessToken answer. It is dropped and only its length reported, never its text.
   */
  end() {
    if (this.discarding) {
      this.#finishLine();
    } else if (this.partBytes > 0) {
      const bytes = this.partBytes;
      this.parts = [];
      this.partBytes = 0;
      this.onPartial(bytes);
    }
  }

  #append(bytes) {
    if (bytes.length === 0) return;
    if (this.discarding) {
      this.discarded += bytes.length;
      return;
    }
    if (this.partBytes + bytes.length > this.maxLineBytes) {
      this.discarding = true;
      this.discarded = this.partBytes + bytes.length;
      this.parts = [];
      this.partBytes = 0;
      return;
    }
    this.parts.push(bytes);
    this.partBytes += bytes.length;
  }

  #finishLine() {
    if (this.discarding) {
      const bytes = this.discarded;
      this.discarding = false;
      this.discarded = 0;
      this.onOverflow(bytes);
      return;
    }
    let line = this.parts.length === 1 ? this.parts[0] : Buffer.concat(this.parts, this.partBytes);
    this.parts = [];
    this.partBytes = 0;
    if (line.length > 0 && line[line.length - 1] === CARRIAGE_RETURN) line = line.subarray(0, line.length - 1);
    const text = line.toString('utf8');
    if (text.trim() === '') return;
    this.onLine(text);
  }
}

/**
 * Keeps the last `limit` lines of a text stream (the host's stderr), so an error can say what
 * the host logged before it died without keeping the whole log.
 */
export class TailBuffer {
  constructor(limit = 50) {
    this.limit = limit;
    this.lines = [];
    this.partial = '';
  }

  /** Adds text; returns the complete lines it finished (for an optional live sink). */
  push(text) {
    const pieces = (this.partial + text).split('\n');
    this.partial = pieces.pop();
    if (this.partial.length > 4096) { // a runaway line: keep its start, as a line of its own
      pieces.push(this.partial.slice(0, 4096) + '…');
      this.partial = '';
    }
    for (const line of pieces) this.#keep(line.replace(/\r$/, ''));
    return pieces;
  }

  end() {
    if (this.partial) this.#keep(this.partial);
    this.partial = '';
  }

  #keep(line) {
    this.lines.push(line);
    if (this.lines.length > this.limit) this.lines.shift();
  }

  /** The kept lines, oldest first (a copy). */
  tail() {
    return this.partial ? [...this.lines, this.partial].slice(-this.limit) : [...this.lines];
  }
}

/**
 * One `authbridge serve` child process.
 *
 * Events:
 * - `line` (text): one line of stdout, i.e. one frame's text;
 * - `overflow` (bytes): stdout carried a line longer than the 64 MiB limit (discarded);
 * - `partial` (bytes): stdout ended inside a line, without its `\n` (discarded);
 * - `stderr` (line): one line of the host's log, if anyone listens (it is drained either way);
 * - `exit` ({code, signal, error, stderrTail}): the host is gone and its stdout has been read to
 *   the end, so every frame it wrote was delivered as a `line` before this. Emitted once.
 *   `error` is set when it could not be started at all (e.g. ENOENT).
 *
 * Why wait for stdout's end before `exit`: the host writes the answers of cancelled requests
 * just before it exits; reporting the exit first would turn those answers into "host exited"
 * errors. The wait is bounded (a grandchild that inherited stdout must not hold it up).
 */
export class HostProcess extends EventEmitter {
  /**
   * @param {string} command the authbridge executable
   * @param {string[]} args its arguments (`serve …`)
   * @param {{env?: NodeJS.ProcessEnv, cwd?: string, stderrLines?: number, exitDrainMs?: number}} [options]
   */
  constructor(command, args, { env, cwd, stderrLines = 50, exitDrainMs = 1000 } = {}) {
    super();
    this.command = command;
    this.args = args;
    this.stderr = new TailBuffer(stderrLines);
    /** {code, signal, error, stderrTail} once the host is gone, else null. */
    this.exitInfo = null;
    this.exited = new Promise((resolve) => this.once('exit', resolve));

    const child = spawn(command, args, { env, cwd, stdio: ['pipe', 'pipe', 'pipe'] });
    this.child = child;
    this.pid = child.pid;

    const decoder = new LineDecoder((line) => this.emit('line', line), {
      onOverflow: (bytes) => this.emit('overflow', bytes),
      onPartial: (bytes) => this.emit('partial', bytes),
    });
    let stdoutEnded = false;
    let stderrEnded = false;
    let processEnded = null; // {code, signal, error}
    let drainTimer = null;
    const settle = () => {
      if (this.exitInfo || !processEnded) return;
      if (!(stdoutEnded && stderrEnded) && drainTimer === null) {
        drainTimer = setTimeout(() => { stdoutEnded = stderrEnded = true; settle(); }, exitDrainMs);
        return;
      }
      if (!(stdoutEnded && stderrEnded)) return;
      clearTimeout(drainTimer);
      this.stderr.end();
      this.exitInfo = { ...processEnded, stderrTail: this.stderr.tail() };
      this.emit('exit', this.exitInfo);
    };

    child.stdout.on('data', (chunk) => decoder.push(chunk));
    child.stdout.once('close', () => { decoder.end(); stdoutEnded = true; settle(); });
    child.stderr.setEncoding('utf8');
    // Always drained: a host whose stderr pipe fills up would block on its next log line.
    child.stderr.on('data', (text) => {
      const lines = this.stderr.push(text);
      if (this.listenerCount('stderr') > 0) for (const line of lines) this.emit('stderr', line);
    });
    child.stderr.once('close', () => { stderrEnded = true; settle(); });
    // Writing after the host closed its stdin (EPIPE) is reported through `exit`, not thrown.
    child.stdin.on('error', () => {});
    child.once('error', (error) => {
      // Spawn failed (no such file, not executable): there is no process and there will be no 'exit'.
      if (processEnded) return;
      processEnded = { code: null, signal: null, error };
      stdoutEnded = stderrEnded = true;
      settle();
    });
    child.once('exit', (code, signal) => {
      if (processEnded) return;
      processEnded = { code, signal, error: null };
      settle();
    });
  }

  /** Whether the host is still there to talk to. */
  get running() {
    return this.exitInfo === null;
  }

  /** Writes one line (a `\n` is added). Returns false when the host is gone. */
  writeLine(text) {
    if (!this.running || this.child.stdin.destroyed || this.child.stdin.writableEnded) return false;
    this.child.stdin.write(text + '\n');
    return true;
  }

  /** Closes the host's stdin: end of input, which the host answers by stopping (spec §2). */
  endInput() {
    if (!this.child.stdin.destroyed && !this.child.stdin.writableEnded) this.child.stdin.end();
  }

  /** Sends a signal (if the host still runs). */
  kill(signal = 'SIGTERM') {
    if (this.running && this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
  }

  /** The host's last stderr lines. */
  stderrTail() {
    return this.stderr.tail();
  }
}

/**
 * Where the agent's socket is: `options.agentSocket`, else AUTHBRIDGE_AGENT_SOCKET (of
 * `options.env`, then of this process), else `$XDG_RUNTIME_DIR/authbridge/agent.sock`;
 * undefined when none can be named.
 * @param {{agentSocket?: string, env?: NodeJS.ProcessEnv}} [options]
 */
export function agentSocketPath(options = {}) {
  if (options.agentSocket) return options.agentSocket;
  const named = options.env?.AUTHBRIDGE_AGENT_SOCKET || process.env.AUTHBRIDGE_AGENT_SOCKET;
  if (named) return named;
  const runtime = options.env?.XDG_RUNTIME_DIR || process.env.XDG_RUNTIME_DIR;
  return runtime && isAbsolute(runtime) ? join(runtime, 'authbridge', 'agent.sock') : undefined;
}

/**
 * Rejects unless `path` is surely this user's agent. Anyone may listen at a path others can
 * write to (AUTHBRIDGE_AGENT_SOCKET in /tmp) and would be handed every request, and answer with
 * tokens and sign-in pages of its own. The host and the Python client ask the kernel who the peer
 * is (SO_PEERCRED); Node's `net` cannot, so the socket file is checked instead: a socket owned by
 * this user, in a folder owned by this user or root that no one else may write to (sticky or
 * not). Only its owner (or root) can then replace the socket between this check and the connect.
 * A missing socket rejects as connect would (ENOENT).
 * @param {string} path
 */
export async function checkOwnSocket(path) {
  const uid = process.getuid?.();
  const refuse = (why) => {
    const error = new Error(`${why}: it is not your authbridge agent`);
    error.code = 'EAGENTNOTYOURS';
    throw error;
  };
  if (uid === undefined) refuse(`nothing tells who answers on ${path} on this platform`);
  const folder = dirname(resolve(path));
  const [socketInfo, folderInfo] = await Promise.all([lstat(path), lstat(folder)]);
  if (!folderInfo.isDirectory() || (folderInfo.uid !== uid && folderInfo.uid !== 0) || (folderInfo.mode & 0o022) !== 0) {
    refuse(`others can write to the folder ${folder} (owner uid ${folderInfo.uid}, mode ${(folderInfo.mode & 0o7777).toString(8)}) ` +
      `and could have put their own socket at ${path}`);
  }
  if (!socketInfo.isSocket() || socketInfo.uid !== uid) {
    refuse(`${path} is ${socketInfo.isSocket() ? `a socket of uid ${socketInfo.uid}` : 'not a socket'}, not yours (uid ${uid})`);
  }
}

/**
 * One connection to the running `authbridge agent`, with HostProcess's interface (`line`,
 * `overflow`, `partial` and `exit` events; writeLine, endInput, kill) so the client does not know
 * which it has. The agent is shared: ending this ends only this connection. Its `exit` info has
 * `agent` (the socket's path) and neither exit status nor log lines: the agent's are its own.
 */
export class AgentSocket extends EventEmitter {
  /**
   * Connects; rejects with the socket's error (`code` ENOENT: no socket; ECONNREFUSED: a socket
   * nothing listens on, its agent died), or with `code` EAGENTNOTYOURS when the socket is not
   * surely this user's agent (see checkOwnSocket).
   * @param {string} path
   * @returns {Promise<AgentSocket>}
   */
  static async connect(path) {
    await checkOwnSocket(path);
    return new Promise((resolve, reject) => {
      const socket = connectSocket(path);
      socket.once('error', reject);
      socket.once('connect', () => {
        socket.off('error', reject);
        resolve(new AgentSocket(path, socket));
      });
    });
  }

  /** @param {string} path @param {import('node:net').Socket} socket a connected socket */
  constructor(path, socket) {
    super();
    this.path = path;
    /** For error messages: what this bridge talks to. */
    this.command = path;
    /** The agent's pid is not known to Node (no SO_PEERCRED). */
    this.pid = undefined;
    this.socket = socket;
    this.exitInfo = null;
    this.exited = new Promise((resolve) => this.once('exit', resolve));
    const decoder = new LineDecoder((line) => this.emit('line', line), {
      onOverflow: (bytes) => this.emit('overflow', bytes),
      onPartial: (bytes) => this.emit('partial', bytes),
    });
    socket.on('data', (chunk) => decoder.push(chunk));
    // Writing after the agent closed the connection (EPIPE) is reported through `exit`.
    socket.on('error', () => {});
    socket.once('close', () => {
      decoder.end();
      this.exitInfo = { code: null, signal: null, error: null, stderrTail: [], agent: path };
      this.emit('exit', this.exitInfo);
    });
  }

  get running() {
    return this.exitInfo === null;
  }

  writeLine(text) {
    if (!this.running || this.socket.destroyed || this.socket.writableEnded) return false;
    this.socket.write(text + '\n');
    return true;
  }

  /** Ends this connection's input: the agent ends its requests and closes the connection. */
  endInput() {
    if (!this.socket.destroyed && !this.socket.writableEnded) this.socket.end();
  }

  /** Drops the connection at once (there is no process of ours to signal). */
  kill() {
    this.socket.destroy();
  }

  stderrTail() {
    return [];
  }
}
