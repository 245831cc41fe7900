// What the official-client tests share: skipping for the host's sake
// (ctest's SKIP_RETURN_CODE 77), a configuration, a private TMPDIR that
// must be empty again at the end, and assertions that say what failed.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const SKIP = 77;

export function skip(why) {
  console.log(`SKIP: ${why}`);
  process.exit(SKIP);
}

export function fail(why) {
  console.error(`FAIL: ${why}`);
  process.exitCode = 1;
  throw new Error(why);
}

export function check(condition, why) {
  if (!condition) fail(why);
}

// The SDK and the inspector are installed by `npm ci` (install.sh); without
// them, or without python3 for the sandboxes, the tests skip.
export async function requireClients() {
  if (!fs.existsSync(new URL('./node_modules/@modelcontextprotocol/sdk/package.json', import.meta.url))) {
    skip('@modelcontextprotocol/sdk is not installed (no npm, or the registry was out of reach: see install.sh)');
  }
  if (!fs.existsSync('/usr/bin/python3')) skip('no /usr/bin/python3 on this host for run_python');
}

// A shell profile and a warm python one, each with limits and a pool of
// one, so that the tests do not build more zygotes than they use.
export const CONFIG = {
  profiles: {
    shell: { limits: { memory: '256M', pids: 64 }, pool: { min_idle: 1, max_idle: 1, max_total: 4 } },
    python: {
      limits: { memory: '512M', pids: 64 },
      pool: { min_idle: 1, max_idle: 1, max_total: 4 },
      interpreter: { argv: ['python3', '-I'], preload: ['json'] },
    },
  },
};

// A directory of this test's own: config.json, keys, and tmp/ (TMPDIR for
// `cubicle mcp`, whose private state directory goes there). Named as the
// C++ tests name theirs ("itest-"), which tests that look for what
// sandboxes leave in /tmp know to be a test's; removed at exit whatever
// happened.
export function makeScratch() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'itest-mcp-'));
  process.on('exit', () => {
    try {
      fs.rmSync(dir, { recursive: true, force: true });
    } catch {
      // a mount a failed server left: its namespace goes with this process
    }
  });
  const tmp = path.join(dir, 'tmp');
  fs.mkdirSync(tmp, { mode: 0o700 });
  const config = path.join(dir, 'config.json');
  fs.writeFileSync(config, JSON.stringify(CONFIG));
  return {
    dir,
    tmp,
    config,
    // Nothing may be left in tmp/ once the server has gone; then it all goes.
    finish() {
      const left = fs.readdirSync(tmp);
      fs.rmSync(dir, { recursive: true, force: true });
      check(left.length === 0, `left in TMPDIR after the server exited: ${left.join(', ')}`);
    },
  };
}

// Waits (bounded) for `predicate` to hold, polling; false when it never did.
export async function eventually(predicate, limitMs = 20000) {
  const deadline = Date.now() + limitMs;
  while (Date.now() < deadline) {
    if (await predicate()) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return false;
}
