#!/usr/bin/env node
/**
 * cellgate-server [/path/to/cellgate.conf] [--name value ...]
 *
 * Reads the configuration (file, then flags, then CELLGATE_* variables), starts the server in the
 * foreground and stops cleanly on SIGTERM/SIGINT. Startup problems (a bad flag, an unreadable file,
 * a port in use) end the process with one clear line on stderr and exit code 1.
 */
import { Config, ConfigError } from './config.js';
import { Logger } from './log.js';
import { Server, VERSION } from './server/server.js';

const USAGE = `Usage: cellgate-server [/path/to/cellgate.conf] [--option value ...]
       cellgate-server --version
       cellgate-server --help

Options are the configuration names (e.g. --port 6380 --dir /data --requirepass s3cret);
CELLGATE_<NAME> environment variables (e.g. CELLGATE_PORT=6380) override both.`;

function fail(message: string): never {
  process.stderr.write(`cellgate: ${message}\n`);
  process.exit(1);
}

async function main(argv: string[]): Promise<void> {
  if (argv[0] === '--version' || argv[0] === '-v') {
    process.stdout.write(`cellgate ${VERSION}\n`);
    return;
  }
  if (argv[0] === '--help' || argv[0] === '-h') {
    process.stdout.write(USAGE + '\n');
    return;
  }
  const config = new Config();
  try {
    let flags = argv;
    if (argv.length > 0 && !argv[0].startsWith('--')) {
      config.loadFile(argv[0]);
      flags = argv.slice(1);
    }
    config.applyFlags(flags);
    config.applyEnv(process.env);
  } catch (e) {
    if (e instanceof ConfigError) fail(e.message);
    throw e;
  }

  const log = new Logger();
  log.level = config.get('loglevel');
  log.format = config.get('log-format') as 'human' | 'json';
  log.file = config.get('logfile');

  const server = new Server(config, log);
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.on(signal, () => server.shutdown(`received ${signal}`));
  }
  try {
    await server.start();
  } catch (e) {
    fail((e as Error).message);
  }
  log.notice(`cellgate ${VERSION} ready to accept connections on port ${server.port}`, {
    version: VERSION,
    port: server.port,
    pid: process.pid,
    bind: config.get('bind'),
  });
}

main(process.argv.slice(2)).catch((e) => {
  process.stderr.write(`cellgate: fatal: ${(e as Error).stack ?? e}\n`);
  process.exit(1);
});
