// Every ```js block of the project's README and of docs/ runs against a real server, as a
// module of its own in this package's directory (so `import 'leasehold'` is this package);
// REDIS_URL tells it the server.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, it } from 'node:test';
import { promisify } from 'node:util';

import { ROOT, startServer } from './helpers.mjs';

const server = await startServer();
after(() => server.stop());

/** The Markdown files a reader runs code from: README.md and every page of docs/. */
const pages = [
  join(ROOT, 'README.md'),
  ...readdirSync(join(ROOT, 'docs'), { recursive: true })
    .filter((name) => name.endsWith('.md'))
    .map((name) => join(ROOT, 'docs', name)),
];
const blocks = pages.flatMap((page) =>
  [...readFileSync(page, 'utf8').matchAll(/```js\n([\s\S]*?)```/g)].map((match) => match[1]),
);

it('the docs have JavaScript to run', () => assert.ok(blocks.length >= 2));

for (const block of blocks) {
  it(`runs: ${block.split('\n')[0]}`, async () => {
    await promisify(execFile)(process.execPath, ['--input-type=module', '-e', block], {
      cwd: join(ROOT, 'clients', 'node'),
      env: { ...process.env, REDIS_URL: server.url },
      timeout: 30_000,
    });
  });
}
