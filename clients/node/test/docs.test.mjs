// Every ```js block of the project's README runs against a real server, as a module of its own
// in this package's directory (so `import 'leasehold'` is this package); REDIS_URL tells it
// the server.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, it } from 'node:test';
import { promisify } from 'node:util';

import { ROOT, startServer } from './helpers.mjs';

const server = await startServer();
after(() => server.stop());

const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
const blocks = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((match) => match[1]);

it('the README has JavaScript to run', () => assert.ok(blocks.length >= 2));

for (const block of blocks) {
  it(`runs: ${block.split('\n')[0]}`, async () => {
    await promisify(execFile)(process.execPath, ['--input-type=module', '-e', block], {
      cwd: join(ROOT, 'clients', 'node'),
      env: { ...process.env, REDIS_URL: server.url },
      timeout: 30_000,
    });
  });
}
