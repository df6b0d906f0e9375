// Harper's entry point for queue-keeper (config.yaml `jsResource`). Plain JavaScript, committed, so it
// is there even when the TypeScript build is not: it loads the compiled component from dist/ and, when
// this copy was installed without its build, says so in Harper's log in one line instead of serving
// nothing in silence.
import { existsSync } from 'node:fs';
import harperdb from 'harperdb';

const entry = new URL('./dist/resources.js', import.meta.url);

if (existsSync(entry)) {
  await import(entry.href);
} else {
  const logger = harperdb.logger?.withTag?.('queue-keeper') ?? harperdb.logger ?? console;
  // Every worker loads this file; worker 0 speaks for the node so the line appears once.
  const worker = harperdb.server?.workerIndex;
  if (worker === undefined || worker === 0) {
    logger.error(
      `queue-keeper is not built: ${entry.pathname} is missing, so none of its endpoints are served; ` +
        'install a packed tarball (npm pack builds it) or run `npm run build` in the queue-keeper folder',
    );
  }
}
