// The TCP sockets a process listens on, read from Linux's /proc (what `ss -ltnp` shows for one pid):
// a test checks that a Harper listens on 127.0.0.1 only. Harper's workers are threads of one process, so
// the pid's file descriptors cover every worker.
import { existsSync, readFileSync, readdirSync, readlinkSync } from 'node:fs';

export interface Listener {
  /** `127.0.0.1`, `0.0.0.0`, `::` or another address as text. */
  address: string;
  port: number;
}

/** Whether this machine can answer listenersOf (Linux with /proc). */
export const canListListeners = existsSync('/proc/self/net/tcp');

function ipv4(hex: string): string {
  // /proc prints the address as a little-endian 32-bit number.
  const b = Buffer.from(hex, 'hex');
  return [b[3], b[2], b[1], b[0]].join('.');
}

function ipv6(hex: string): string {
  // Four little-endian 32-bit words; written out in full, then `::` for the all-zero address.
  const words: string[] = [];
  for (let i = 0; i < 32; i += 8) {
    const w = Buffer.from(hex.slice(i, i + 8), 'hex')
      .reverse()
      .toString('hex');
    words.push(w.slice(0, 4), w.slice(4));
  }
  const full = words.map((w) => w.replace(/^0{1,3}/, '')).join(':');
  if (full === '0:0:0:0:0:0:0:0') return '::';
  if (full === '0:0:0:0:0:ffff:7f00:1') return '::ffff:127.0.0.1';
  if (full === '0:0:0:0:0:0:0:1') return '::1';
  return full;
}

/** Every TCP socket process `pid` listens on (IPv4 and IPv6), one entry per socket. */
export function listenersOf(pid: number): Listener[] {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    let target: string;
    try {
      target = readlinkSync(`/proc/${pid}/fd/${fd}`);
    } catch {
      continue; // closed since the directory was read
    }
    const m = /^socket:\[(\d+)\]$/.exec(target);
    if (m) inodes.add(m[1]!);
  }
  const out: Listener[] = [];
  for (const [file, decode] of [
    ['tcp', ipv4],
    ['tcp6', ipv6],
  ] as const) {
    const path = `/proc/${pid}/net/${file}`;
    if (!existsSync(path)) continue;
    for (const line of readFileSync(path, 'utf8').split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      // f[1] local address:port, f[3] state (0A is LISTEN), f[9] inode
      if (f.length < 10 || f[3] !== '0A' || !inodes.has(f[9]!)) continue;
      const [addr, port] = f[1]!.split(':') as [string, string];
      out.push({ address: decode(addr), port: parseInt(port, 16) });
    }
  }
  return out;
}
