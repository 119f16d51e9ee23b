#!/usr/bin/env node
/* tests/browser/check-html.js - open a `gpumemreport html` page in headless
 * Chromium and report, as JSON on stdout, what a person would see:
 *
 *   node check-html.js PAGE.html [--screenshot FILE.png] [--chromium PATH]
 *                      [--segments-shot FILE.png] [--oom-shot FILE.png]
 *                      [--no-interact]
 *
 * Per trace section: the site bands the timeline draws (and whether an
 * "other" band is drawn), the peak card's text, the tooltip shown when
 * the pointer rests on each site band at the peak's column, what a drag
 * across the chart does to the time axis (zoom) and the reset; the flame
 * graph's frames before and after a click on its widest frame; the pool
 * map's segment boxes, the memory-by-kind bar and table, their pieces (blocks and free runs), and the
 * tooltip over the widest allocated block (--segments-shot: a picture of
 * the map with it showing); the out-of-memory section, if any: its tabs,
 * and for each (clicked) its request line, site, cards, live-by-kind
 * line, live sites and whatif's rows (--oom-shot: a picture of the first
 * trace's section); the "held by" rows under the tables' sites. Page-wide: console errors and warnings, uncaught
 * page errors, failed requests (the page must load nothing), the page
 * text, and load_ms: from navigation until the page says it has drawn
 * (body[data-ready]). Exit status 0 whenever the page could be opened;
 * the caller asserts (tests/e2e/test_html.py); 2 when it could not.
 *
 * Drives Debian's /usr/bin/chromium through playwright-core (pinned in
 * package.json, installed by scripts/install-deps.sh with npm ci).
 */
'use strict';
const path = require('path');
const { chromium } = require('playwright-core');

function args(argv) {
  const o = { page: null, screenshot: null, chromium: process.env.CHROMIUM || '/usr/bin/chromium',
              interact: true };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--screenshot') o.screenshot = argv[++i];
    else if (a === '--chromium') o.chromium = argv[++i];
    else if (a === '--no-interact') o.interact = false;
    else if (a === '--segments-shot') o.segshot = argv[++i];
    else if (a === '--oom-shot') o.oomshot = argv[++i];
    else if (!o.page) o.page = a;
    else throw new Error('unexpected argument ' + a);
  }
  if (!o.page) throw new Error('usage: check-html.js PAGE.html [--screenshot FILE.png]');
  return o;
}

async function tipText(page) {
  return page.evaluate(() => {
    const t = document.getElementById('tip');
    return t.hidden ? null : t.innerText;
  });
}

async function timelineChecks(page, svgSel) {
  const out = {};
  const info = await page.evaluate((s) => {
    const svg = document.querySelector(s), r = svg.getBoundingClientRect();
    /* the peak's column, [x0, x1) in the chart: a whole client pixel in
     * it (the pointer's positions are whole pixels), relative to the chart */
    function peakX(g) {
      const x0 = r.left + +g.getAttribute('data-peak-x0'), x1 = r.left + +g.getAttribute('data-peak-x1');
      const c = Math.ceil(x0 + 1e-6);
      return (c < x1 ? c : (x0 + x1) / 2) - r.left;
    }
    const bands = [...svg.querySelectorAll('path.band.site')].map((p) => ({
      band: p.getAttribute('data-band'), y0: +p.getAttribute('data-peak-y0'),
      y1: +p.getAttribute('data-peak-y1'), fill: p.getAttribute('fill') }));
    const ticks = [...svg.querySelectorAll('.axis text')].map((t) => t.textContent);
    return { left: r.left, top: r.top, width: r.width, peakX: peakX(svg),
             bands, other: !!svg.querySelector('path.band.other'), ticks,
             lines: [...svg.querySelectorAll('path.line')].map((p) => p.getAttribute('class')),
             ooms: svg.querySelectorAll('line.oom').length,
             marks: svg.querySelectorAll('line.mark').length + svg.querySelectorAll('rect.phase').length };
  }, svgSel);
  Object.assign(out, { bands: info.bands.length, other_band: info.other, lines: info.lines,
                       ooms: info.ooms, marks: info.marks, ticks_before: info.ticks });
  out.hover = [];
  for (const b of info.bands) {
    if (!(b.y1 - b.y0 >= 1)) { out.hover.push({ band: b.band, tip: null, thin: true }); continue; }
    await page.mouse.move(info.left + info.peakX, info.top + (b.y0 + b.y1) / 2);
    await page.waitForTimeout(30);
    out.hover.push({ band: b.band, tip: await tipText(page) });
  }
  /* drag across the middle third: zoom; the time axis must change */
  const y = info.top + 150;
  await page.mouse.move(info.left + info.width * 0.4, y);
  await page.mouse.down();
  await page.mouse.move(info.left + info.width * 0.5, y, { steps: 4 });
  await page.mouse.up();
  await page.waitForTimeout(50);
  out.ticks_zoomed = await page.evaluate((s) =>
    [...document.querySelectorAll(s + ' .axis text')].map((t) => t.textContent), svgSel);
  await page.mouse.move(0, 0);
  await page.evaluate((s) => {
    const sec = document.querySelector(s).closest('section');
    sec.querySelector('.chartbar button').click();
  }, svgSel);
  out.ticks_reset = await page.evaluate((s) =>
    [...document.querySelectorAll(s + ' .axis text')].map((t) => t.textContent), svgSel);
  return out;
}

async function flameChecks(page, sectionSel) {
  const count = () => page.evaluate((s) =>
    document.querySelectorAll(s + ' svg.flame rect').length, sectionSel);
  const before = await count();
  /* the widest frame below the root: click it, it fills the width */
  const target = await page.evaluate((s) => {
    const rects = [...document.querySelectorAll(s + ' svg.flame rect')].filter((r) => +r.getAttribute('y') > 0);
    if (!rects.length) return null;
    rects.sort((a, b) => (+b.getAttribute('width')) - (+a.getAttribute('width')) ||
                         (+b.getAttribute('y')) - (+a.getAttribute('y')));
    const deepest = rects.filter((r) => +r.getAttribute('width') < +rects[0].getAttribute('width'))[0] || rects[0];
    const b = deepest.getBoundingClientRect();
    return { x: b.left + Math.min(3, b.width / 2), y: b.top + b.height / 2, name: deepest.getAttribute('data-name'),
             width: +deepest.getAttribute('width') };
  }, sectionSel);
  const out = { frames: before, clicked: target && target.name, width_before: target && target.width };
  if (target) {
    await page.mouse.click(target.x, target.y);
    await page.waitForTimeout(30);
    out.width_after = await page.evaluate(([s, n]) => {
      const r = [...document.querySelectorAll(s + ' svg.flame rect')].find((x) => x.getAttribute('data-name') === n);
      return r ? +r.getAttribute('width') : null;
    }, [sectionSel, target.name]);
    out.svg_width = await page.evaluate((s) => document.querySelector(s + ' svg.flame').clientWidth, sectionSel);
    await page.evaluate((s) => {
      const b = document.querySelector(s + ' .flame').previousElementSibling.querySelector('button.on');
      if (b) b.click();
    }, sectionSel);
    out.total_button = await page.evaluate((s) => {
      const b = [...document.querySelectorAll(s + ' button[data-which="total"]')][0];
      b.click();
      return document.querySelectorAll(s + ' svg.flame rect').length;
    }, sectionSel);
  }
  return out;
}

/* The out-of-memory section of a trace as it reads: null when there is
 * none; else its heading, its tabs and, per tab after a click on it, the
 * event's lines and tables as text. */
async function oomChecks(page, sec) {
  const head = await page.evaluate((s) => {
    const box = document.querySelector(s + ' div.oom');
    if (!box) return null;
    return { heading: box.previousElementSibling.innerText,
             tabs: [...box.querySelectorAll('.tabs button')].map((b) => b.innerText),
             hint: [...box.querySelectorAll(':scope > p')].map((p) => p.innerText) };
  }, sec);
  if (!head) return null;
  head.events = [];
  for (let i = 0; i < head.tabs.length; i++) {
    head.events.push(await page.evaluate(([s, i]) => {
      const box = document.querySelector(s + ' div.oom');
      box.querySelectorAll('.tabs button')[i].click();
      const body = box.querySelector('.oombody'), txt = (q) => { const e = body.querySelector(q); return e ? e.innerText : null; };
      const rows = (q) => [...body.querySelectorAll(q + ' table tr')].slice(1).map((tr) =>
        [...tr.querySelectorAll('td')].map((td) => td.innerText));
      return { on: box.querySelector('.tabs button.on').innerText, request: txt('.oomreq'),
               site: body.querySelector('.oomsite summary') ? txt('.oomsite summary') : txt('.oomsite'),
               stack: body.querySelector('.oomsite pre') ? body.querySelector('.oomsite pre').textContent : null,
               cards: [...body.querySelectorAll('.card')].map((c) => ({
                 k: c.querySelector('.k').innerText, v: c.querySelector('.v').innerText,
                 x: c.querySelector('.x') ? c.querySelector('.x').innerText : '', bad: c.classList.contains('bad') })),
               kinds: txt('.oomkinds'), sites_heading: txt('h4'), sites: rows('.oomsites'),
               whatif_heading: txt('.oomwhatif h4') || txt('.oomwhatif p'), whatif: rows('.oomwhatif'),
               verdict_colors: [...body.querySelectorAll('.oomwhatif td.verdict')].map((td) => getComputedStyle(td).color) };
    }, [sec, i]));
  }
  if (head.tabs.length)
    await page.evaluate((s) => document.querySelector(s + ' div.oom .tabs button').click(), sec);
  return head;
}

async function main() {
  const o = args(process.argv.slice(2));
  const result = { console: [], page_errors: [], requests_failed: [], requests: [], traces: [] };
  const browser = await chromium.launch({
    executablePath: o.chromium, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning')
        result.console.push({ type: m.type(), text: m.text() });
    });
    page.on('pageerror', (e) => result.page_errors.push(String(e)));
    page.on('requestfailed', (r) => result.requests_failed.push(r.url()));
    page.on('request', (r) => { if (!r.url().startsWith('file:') && !r.url().startsWith('data:')) result.requests.push(r.url()); });
    const url = 'file://' + path.resolve(o.page);
    const t0 = Date.now();
    await page.goto(url, { waitUntil: 'load', timeout: 120000 });
    await page.waitForSelector('body[data-ready="true"]', { timeout: 120000 });
    result.load_ms = Date.now() - t0;
    result.title = await page.title();
    result.text = await page.evaluate(() => document.body.innerText);
    const n = await page.evaluate(() => document.querySelectorAll('section.trace').length);
    for (let i = 0; i < n; i++) {
      const sec = '#trace-' + i;
      const t = { peak_card: await page.evaluate((s) => {
        const c = document.querySelector(s + ' .card.peak');
        return c ? { text: c.innerText, bytes: c.getAttribute('data-bytes') } : null;
      }, sec) };
      t.segments = await page.evaluate((s) => document.querySelectorAll(s + ' .segmap .seg').length, sec);
      t.kinds = await page.evaluate((s) => {
        const box = document.querySelector(s + ' .kinds');
        if (!box) return null;
        return { bar: [...box.querySelectorAll('.kindbar .kind')].map((d) => ({
                   kind: d.getAttribute('data-kind'), width: d.getBoundingClientRect().width })),
                 bar_width: box.querySelector('.kindbar').getBoundingClientRect().width,
                 rows: [...box.querySelectorAll('table tr')].slice(1).map((tr) =>
                   [...tr.querySelectorAll('td')].map((td) => td.innerText)) };
      }, sec);
      t.pieces = await page.evaluate((s) => document.querySelectorAll(s + ' .segmap .seg .pc').length, sec);
      t.oom = await oomChecks(page, sec);
      if (t.oom && i === 0 && o.oomshot)
        await page.screenshot({ path: o.oomshot, clip: await page.evaluate((s) => {
          const box = document.querySelector(s + ' div.oom'), h = box.previousElementSibling;
          h.scrollIntoView({ block: 'start' });
          window.scrollBy(0, -60); /* clear of the sticky header */
          const a = h.getBoundingClientRect(), b = box.getBoundingClientRect();
          return { x: 0, y: Math.max(0, a.top - 10), width: 1400, height: Math.min(900, b.bottom - a.top + 20) };
        }, sec) });
      if (o.interact) {
        /* the pointer on the widest allocated block of the pool's map */
        const at = await page.evaluate((s) => {
          let best = null, w = 0;
          for (const p of document.querySelectorAll(s + ' .segmap .seg .pc.a')) {
            const r = p.getBoundingClientRect();
            if (r.width > w) { w = r.width; best = p; }
          }
          if (!best) return null;
          best.scrollIntoView({ block: 'center' });
          const r = best.getBoundingClientRect();
          return { x: Math.floor(r.left + r.width / 2), y: Math.floor(r.top + r.height / 2) };
        }, sec);
        if (at) {
          await page.mouse.move(at.x, at.y);
          t.block_tip = await tipText(page);
          if (i === 0 && o.segshot)
            await page.screenshot({ path: o.segshot, clip: await page.evaluate((s) => {
              const r = document.querySelector(s + ' .segmap').parentElement.getBoundingClientRect();
              return { x: 0, y: Math.max(0, r.top - 80), width: 1400, height: Math.min(900, r.height + 360) };
            }, sec) });
          await page.mouse.move(0, 0);
        }
      }
      t.table_rows = await page.evaluate((s) => document.querySelectorAll(s + ' table tr').length, sec);
      /* the "held by" rows under the tables' sites: the site row above each */
      t.held_rows = await page.evaluate((s) => [...document.querySelectorAll(s + ' table tr.held')].map((tr) => {
        let up = tr.previousElementSibling;
        while (up && up.classList.contains('held')) up = up.previousElementSibling;
        const site = up ? up.querySelector('td.site') : null;
        return { text: tr.innerText, site: site ? site.innerText : null,
                 table: tr.closest('table').previousElementSibling.innerText,
                 visible: tr.getBoundingClientRect().height > 0 };
      }), sec);
      if (o.interact) {
        await page.evaluate((s) => document.querySelector(s).scrollIntoView(), sec);
        Object.assign(t, await timelineChecks(page, sec + ' svg.timeline'));
        if (i === 0 && o.screenshot) {
          await page.mouse.move(0, 0);
          await page.evaluate(() => window.scrollTo(0, 0));
        }
        t.flame = await flameChecks(page, sec);
      } else {
        t.bands = await page.evaluate((s) => document.querySelectorAll(s + ' svg.timeline path.band.site').length, sec);
      }
      result.traces.push(t);
    }
    if (o.screenshot) {
      /* a person's first look: the top of the page, one band hovered */
      await page.evaluate(() => window.scrollTo(0, 0));
      const hov = await page.evaluate(() => {
        const svg = document.querySelector('#trace-0 svg.timeline'), p = svg && svg.querySelector('path.band.site');
        if (!p) return null;
        const r = svg.getBoundingClientRect();
        const x0 = r.left + +svg.getAttribute('data-peak-x0'), x1 = r.left + +svg.getAttribute('data-peak-x1');
        return { x: Math.ceil(x0 + 1e-6) < x1 ? Math.ceil(x0 + 1e-6) : (x0 + x1) / 2,
                 y: r.top + (+p.getAttribute('data-peak-y0') + +p.getAttribute('data-peak-y1')) / 2 };
      });
      if (hov) await page.mouse.move(hov.x, hov.y);
      await page.waitForTimeout(50);
      await page.screenshot({ path: o.screenshot, fullPage: false });
      result.screenshot = o.screenshot;
    }
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(result) + '\n');
}

main().catch((e) => {
  process.stderr.write('check-html: ' + (e && e.stack || e) + '\n');
  process.exit(2);
});
