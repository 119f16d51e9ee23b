// check-speedscope.js FILE... - load each file in the speedscope viewer
// (the npm package's own page, dist/release/index.html) in Debian's
// headless Chromium, as its command line `speedscope FILE` does (the file
// handed over as a script that calls speedscope.loadFileFromBase64), and
// print one JSON line per file: the page's title once the profile is
// shown, the text of its toolbar, and any console or page errors.
// Used by tests/e2e/test_export.py for the speedscope and perfetto exports.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');

const page = path.join(__dirname, 'node_modules', 'speedscope', 'dist', 'release', 'index.html');

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--allow-file-access-from-files'],
    headless: true,
  });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'check-speedscope-'));
  try {
    for (const file of process.argv.slice(2)) {
      const name = path.basename(file);
      const loader = path.join(dir, name + '.js');
      fs.writeFileSync(loader, `speedscope.loadFileFromBase64(${JSON.stringify(name)}, ` +
                       `${JSON.stringify(fs.readFileSync(file).toString('base64'))})`);
      const p = await browser.newPage();
      const errors = [];
      p.on('console', m => { if (m.type() === 'error') errors.push(m.text()); });
      p.on('pageerror', e => errors.push(String(e)));
      await p.goto('file://' + page + '#localProfilePath=' + loader);
      // loaded: speedscope titles the page after the profile
      let title = '';
      for (let i = 0; i < 100 && !/ - speedscope$/.test(title); i++) {
        await p.waitForTimeout(100);
        title = await p.title();
      }
      const text = await p.evaluate(() => document.body.innerText.slice(0, 1000));
      console.log(JSON.stringify({ file, title, text, errors }));
      await p.close();
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
    await browser.close();
  }
})().catch(e => { console.error(String(e)); process.exit(1); });
