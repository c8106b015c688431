// The few Node declarations index.d.ts refers to, for type-checking it where @types/node is
// not installed (Debian ships TypeScript but not @types/node). With @types/node, drop this file.
declare namespace NodeJS {
  type Signals = 'SIGABRT' | 'SIGHUP' | 'SIGINT' | 'SIGKILL' | 'SIGTERM' | 'SIGSEGV';
  interface ProcessEnv { [key: string]: string | undefined }
}
declare module 'node:events' {
  export class EventEmitter<T = any> {
    on<K extends keyof T & string>(event: K, listener: (...args: T[K] extends any[] ? T[K] : any[]) => void): this;
    off<K extends keyof T & string>(event: K, listener: (...args: T[K] extends any[] ? T[K] : any[]) => void): this;
    emit<K extends keyof T & string>(event: K, ...args: T[K] extends any[] ? T[K] : any[]): boolean;
  }
}
declare class Buffer extends Uint8Array {}
