/**
 * A userspace TCP proxy that adds latency (tc netem is not available on the test machines): it
 * listens on a loopback port, forwards every connection to a target, and holds each chunk for
 * `delayMs` in both directions before passing it on, in order. The delay can be changed at any time
 * (`setDelay`); chunks already held keep the delay they were given. `cut()` resets every open
 * connection, `close()` ends the proxy.
 */
import net from 'node:net';

export class DelayProxy {
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();
  private delayMs = 0;
  /** Chunks forwarded (both directions), for self-tests. */
  chunks = 0;
  port = 0;

  private constructor(private readonly targetPort: number, private readonly targetHost: string) {
    this.server = net.createServer((client) => this.accept(client));
  }

  static async start(targetPort: number, opts: { targetHost?: string; delayMs?: number } = {}): Promise<DelayProxy> {
    const proxy = new DelayProxy(targetPort, opts.targetHost ?? '127.0.0.1');
    proxy.delayMs = opts.delayMs ?? 0;
    await new Promise<void>((resolve, reject) => {
      proxy.server.once('error', reject);
      proxy.server.listen(0, '127.0.0.1', () => resolve());
    });
    proxy.port = (proxy.server.address() as net.AddressInfo).port;
    return proxy;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** From now on, every chunk waits `ms` before it is forwarded (0: straight through). */
  setDelay(ms: number): void {
    this.delayMs = ms;
  }

  get delay(): number {
    return this.delayMs;
  }

  private accept(client: net.Socket): void {
    const upstream = net.connect({ port: this.targetPort, host: this.targetHost });
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    this.sockets.add(client);
    this.sockets.add(upstream);
    const done = (): void => {
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    client.on('error', done).on('close', done);
    upstream.on('error', done).on('close', done);
    this.pipe(client, upstream);
    this.pipe(upstream, client);
  }

  /**
   * Forwards `from` → `to`, each chunk after the delay in force when it arrived; a chunk never
   * overtakes an earlier one (its release time is at least the previous chunk's).
   */
  private pipe(from: net.Socket, to: net.Socket): void {
    let lastRelease = 0;
    let pending = 0;
    let ended = false;
    const finish = (): void => {
      if (ended && pending === 0 && !to.destroyed) to.end();
    };
    from.on('data', (chunk: Buffer) => {
      this.chunks++;
      if (this.delayMs <= 0 && pending === 0) {
        if (!to.destroyed) to.write(chunk);
        return;
      }
      const release = Math.max(Date.now() + this.delayMs, lastRelease);
      lastRelease = release;
      pending++;
      setTimeout(() => {
        pending--;
        if (!to.destroyed) to.write(chunk);
        finish();
      }, release - Date.now());
    });
    from.on('end', () => {
      ended = true;
      finish();
    });
  }

  /** Resets every open connection through the proxy (new connections are still accepted). */
  cut(): void {
    for (const s of this.sockets) {
      try {
        s.resetAndDestroy();
      } catch {
        s.destroy();
      }
    }
    this.sockets.clear();
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
