/* report/html/report.js - the page of `gpumemreport html`.
 *
 * Reads the traces' data from the JSON element #gmt-data (written by
 * report/html_trace.c) and draws, per trace, hand-written SVG and HTML:
 * summary cards, the timeline stacked by site (hover: the site, its
 * stack, bytes and time; drag: zoom; double-click or the button: reset),
 * the flame graph (peak or total; click a frame to zoom into it), the
 * pool's segments at the peak and at each out-of-memory event, what
 * summary says of each out-of-memory event, and the tables. No framework and no network. Figures come exact from the
 * program; the page only formats them (exact bytes on hover).
 *
 * Decimation: the program sends up to 2000 time buckets, each with its
 * largest requested total and the bands at that moment; the chart merges
 * buckets into pixel columns by taking, per column, the bucket with the
 * largest total, so the peak is always drawn at its height.
 */
(function () {
  'use strict';

  var SVGNS = 'http://www.w3.org/2000/svg';
  var PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948',
                 '#b07aa1', '#ff9da7', '#9c755f', '#86bcb6', '#d37295', '#a0cbe8',
                 '#ffbe7d', '#8cd17d', '#f1ce63', '#499894'];
  var OTHER = '#bab0ac';
  var data = JSON.parse(document.getElementById('gmt-data').textContent);
  var traces = data.traces || [];
  var shared = { on: traces.length > 1, lo: null, hi: null, views: [] };
  var tip = document.getElementById('tip');

  /* ---- formatting ------------------------------------------------------- */

  function fmtBytes(n) {
    var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'], i = 0, v = Math.abs(n);
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    var s = i === 0 ? String(v) : v.toFixed(2);
    return (n < 0 ? '-' : '') + s + ' ' + u[i];
  }
  function fmtExact(n) { return String(n) + ' bytes'; }
  function fmtTime(ns) {
    var s = ns / 1e9;
    if (s === 0) return '0 s';
    if (Math.abs(s) < 1e-3) return (s * 1e6).toFixed(s * 1e6 < 10 ? 2 : 0) + ' \u00b5s';
    if (Math.abs(s) < 1) return (s * 1e3).toFixed(s * 1e3 < 10 ? 2 : 1) + ' ms';
    if (Math.abs(s) < 600) return s.toFixed(s < 10 ? 3 : 2) + ' s';
    return (s / 60).toFixed(1) + ' min';
  }
  function pct(a, b) { return b ? (100 * a / b).toFixed(1) + '%' : ''; }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function sel(tag, attrs) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    return e;
  }
  function color(i, n) { return i === n ? OTHER : PALETTE[i % PALETTE.length]; }
  function frames(stack) { return stack || []; } /* innermost first */

  /* ---- tooltip ----------------------------------------------------------- */

  function showTip(ev, title, lines, stack) {
    tip.textContent = '';
    tip.appendChild(el('div', { 'class': 't' }, title));
    lines.forEach(function (l) { tip.appendChild(el('div', null, l)); });
    if (stack && stack.length)
      tip.appendChild(el('div', { 'class': 's' }, stack.join('\n')));
    tip.hidden = false;
    var w = tip.offsetWidth, h = tip.offsetHeight;
    var x = ev.clientX + 14, y = ev.clientY + 14;
    if (x + w > window.innerWidth - 4) x = Math.max(4, ev.clientX - w - 14);
    if (y + h > window.innerHeight - 4) y = Math.max(4, ev.clientY - h - 14);
    tip.style.left = x + 'px';
    tip.style.top = y + 'px';
  }
  function hideTip() { tip.hidden = true; }

  /* ---- axes --------------------------------------------------------------- */

  function niceStep(range, n) {
    var raw = range / Math.max(1, n), p = Math.pow(10, Math.floor(Math.log10(raw)));
    var m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * p;
  }
  function byteTicks(max) {
    var unit = 1;
    while (max / unit >= 1024 && unit < Math.pow(1024, 5)) unit *= 1024;
    var step = niceStep(max / unit, 4) * unit, t = [];
    for (var v = 0; v <= max * 1.0001 && t.length < 20; v += step) t.push(v);
    return t;
  }

  /* ---- summary -------------------------------------------------------------- */

  function card(parent, k, v, x, bad) {
    var c = el('div', { 'class': 'card' + (bad ? ' bad' : '') });
    c.appendChild(el('div', { 'class': 'k' }, k));
    c.appendChild(el('div', { 'class': 'v' }, v));
    if (x) c.appendChild(el('div', { 'class': 'x' }, x));
    parent.appendChild(c);
    return c;
  }

  function summary(sec, t) {
    var s = t.summary, cards = el('div', { 'class': 'cards' });
    var pc = card(cards, 'peak requested', fmtBytes(s.peak_requested),
                  fmtExact(s.peak_requested) + ' at ' + fmtTime(s.peak_requested_at_ns));
    pc.classList.add('peak');
    pc.setAttribute('data-bytes', String(s.peak_requested));
    card(cards, 'peak allocated', fmtBytes(s.peak_allocated), fmtExact(s.peak_allocated));
    card(cards, 'peak reserved', fmtBytes(s.peak_reserved),
         fmtExact(s.peak_reserved) + ' at ' + fmtTime(s.peak_reserved_at_ns));
    if (s.beyond !== null)
      card(cards, 'beyond the trace', fmtBytes(s.beyond),
           (s.beyond_source === 'process' ? 'this process' : 'whole device') +
           ': context, libraries');
    card(cards, 'live at exit', fmtBytes(s.leaked),
         s.leaked_allocations + ' allocations' + (t.cut ? ' (trace cut short)' : ''));
    card(cards, 'out of memory', String(s.ooms), s.ooms ? 'failed allocations' : '', s.ooms > 0);
    card(cards, 'allocations', String(s.allocations), s.frees + ' frees, ' + s.events + ' events');
    card(cards, 'duration', fmtTime(t.duration_ns), t.pool ? 'gpumemtrace pool on' :
         t.framework ? "PyTorch's allocator events" : '');
    sec.appendChild(cards);
    if (s.devices.length) {
      sec.appendChild(el('div', { 'class': 'sub' }, s.devices.map(function (d) {
        return 'device ' + d.device + (d.name ? ' (' + d.name + ')' : '') +
          (d.total ? ', ' + fmtBytes(d.total) : '') + ': peak requested ' +
          fmtBytes(d.peak_requested) + ', reserved ' + fmtBytes(d.peak_reserved);
      }).join('; ')));
    }
  }

  /* ---- memory by kind ------------------------------------------------------------- */

  var KIND_COLORS = { parameters: '#2563eb', gradients: '#16a34a', optimizer_state: '#9333ea',
                      activations: '#ea580c', temporaries: '#eab308', workspaces: '#0891b2',
                      held: '#64748b', other: '#cbd5e1' };

  /* The bytes at the peak by kind: one bar of their shares, and the table
   * summary prints, each kind with the library layers that hold most of it. */
  function kinds(sec, t) {
    var total = t.summary.peak_requested, rows = t.kinds.filter(function (k) { return k.bytes > 0; });
    sec.appendChild(el('h3', null, 'At the peak, by kind (inferred from stacks and lifetimes)'));
    var box = el('div', { 'class': 'kinds' }), bar = el('div', { 'class': 'kindbar' });
    sec.appendChild(box);
    rows.forEach(function (k) {
      var d = el('div', { 'class': 'kind', 'data-kind': k.kind });
      d.style.width = (100 * k.bytes / Math.max(1, total)) + '%';
      d.style.background = KIND_COLORS[k.kind] || '#94a3b8';
      d.addEventListener('mousemove', function (ev) {
        showTip(ev, k.name, [fmtBytes(k.bytes) + ' (' + fmtExact(k.bytes) + ') in ' + k.blocks + ' blocks, ' +
                             (100 * k.bytes / Math.max(1, total)).toFixed(1) + '% of the peak', 'known by: ' + k.basis]);
      });
      d.addEventListener('mouseleave', hideTip);
      bar.appendChild(d);
    });
    box.appendChild(bar);
    var flat = [];
    rows.forEach(function (k) {
      flat.push({ bytes: k.bytes, blocks: k.blocks, what: k.name, basis: k.basis, color: KIND_COLORS[k.kind] });
      k.layers.forEach(function (l) { flat.push({ bytes: l.bytes, blocks: l.blocks, what: '\u2003' + l.layer, basis: '' }); });
    });
    table(box, [{ h: 'bytes', n: true, get: function (r) { return fmtBytes(r.bytes); }, exact: function (r) { return fmtExact(r.bytes); } },
                { h: 'share', n: true, get: function (r) { return (100 * r.bytes / Math.max(1, total)).toFixed(1) + '%'; } },
                { h: 'blocks', n: true, get: function (r) { return String(r.blocks); } },
                { h: 'kind', get: function (r) { return r.what; } },
                { h: 'known by', get: function (r) { return r.basis; } }],
          flat, null, 'nothing live at the peak');
  }

  /* ---- out-of-memory events ------------------------------------------------------ */

  /* What summary says of each explained out-of-memory event, one tab each:
   * the failed request and its site, the device's memory then (the
   * largest free block and the free memory in red when the request was
   * bigger), what was live by kind and by site, and whether whatif's
   * models - the same requests, then the failed one - would have served
   * it. Nothing for a trace without out-of-memory events. */
  function ooms(sec, t) {
    var evs = t.oom_events.filter(function (e) { return e.explained; });
    if (!t.summary.ooms) return;
    var box = el('div', { 'class': 'oom' });
    sec.appendChild(el('h3', null, 'Out of memory: ' + t.summary.ooms + ' failed allocation' +
                       (t.summary.ooms === 1 ? '' : 's')));
    sec.appendChild(box);
    if (!evs.length) {
      box.appendChild(el('p', { 'class': 'empty' }, 'not explained: the trace could not be read again up to them'));
      return;
    }
    var tabs = el('div', { 'class': 'tabs' }), body = el('div', { 'class': 'oombody' }), buttons = [];
    box.appendChild(tabs);
    box.appendChild(body);
    evs.forEach(function (e, i) {
      var n = t.oom_events.indexOf(e) + 1;
      var b = el('button', { type: 'button', 'data-oom': n }, '#' + n + ': ' + fmtBytes(e.size) + ' at ' + fmtTime(e.time_ns));
      b.addEventListener('click', function () { show(i); });
      tabs.appendChild(b);
      buttons.push(b);
    });
    var rest = t.summary.ooms - evs.length;
    if (rest > 0)
      box.appendChild(el('p', { 'class': 'hint' }, 'and ' + rest + ' more (peak --at oom:N shows what was live at the Nth)'));
    function show(i) {
      buttons.forEach(function (b, j) { b.classList.toggle('on', i === j); });
      body.textContent = '';
      oomEvent(body, t, evs[i], t.oom_events.indexOf(evs[i]));
    }
    show(0);
  }

  function oomEvent(body, t, e, k) {
    var req = el('p', { 'class': 'oomreq' });
    req.appendChild(el('b', null, fmtBytes(e.size)));
    req.appendChild(document.createTextNode(' (' + fmtExact(e.size) + ') on device ' + e.device +
      (e.framework ? " (PyTorch's caching allocator)" : ' (a CUDA allocation)') + ' failed at ' +
      fmtTime(e.time_ns) + ', requested at'));
    body.appendChild(req);
    /* the timeline's list is the same events in the same order: its stack */
    var o = t.timeline.ooms[k], site = el('div', { 'class': 'oomsite' });
    if (o && o.site === e.site && o.stack && o.stack.length) {
      var det = el('details');
      det.appendChild(el('summary', null, e.site));
      det.appendChild(el('pre', null, frames(o.stack).join('\n')));
      site.appendChild(det);
    } else site.textContent = e.site;
    body.appendChild(site);
    var cards = el('div', { 'class': 'cards' }), dev = 'on device ' + e.device + ' then';
    card(cards, 'allocated', fmtBytes(e.allocated), 'blocks handed out ' + dev);
    card(cards, 'reserved', fmtBytes(e.reserved), 'held from the driver ' + dev);
    if (e.largest_free_block !== null)
      card(cards, 'largest free block', fmtBytes(e.largest_free_block), 'inside the reserved memory',
           e.largest_free_block < e.size);
    if (e.free !== null)
      card(cards, 'free', fmtBytes(e.free), 'of ' + fmtBytes(e.device_total) +
           (e.free_reported !== null ? '; ' + fmtBytes(e.free_reported) + ' when it failed, as recorded' : ''),
           e.free < e.size);
    if (e.beyond_trace !== null)
      card(cards, 'beyond the trace', fmtBytes(e.beyond_trace), 'context, libraries');
    body.appendChild(cards);
    if (e.live_by_kind) {
      var ks = e.live_by_kind.filter(function (x) { return x.bytes > 0; })
        .sort(function (a, b) { return b.bytes - a.bytes || (a.name < b.name ? -1 : 1); });
      body.appendChild(el('div', { 'class': 'oomkinds' }, 'live then by kind: ' + (ks.length ? ks.map(function (x) {
        return fmtBytes(x.bytes) + ' ' + x.name;
      }).join('; ') : 'nothing')));
    }
    var live = e.live_requested;
    body.appendChild(el('h4', null, 'Live then by site, ' + fmtBytes(live) + ' in all'));
    var sites = el('div', { 'class': 'oomsites' });
    body.appendChild(sites);
    var rounded = e.live_by_site.some(function (r) { return r.allocated !== r.bytes; });
    var cols = [{ h: 'bytes', n: true, get: function (r) { return fmtBytes(r.bytes); }, exact: function (r) { return fmtExact(r.bytes); } }];
    if (rounded) cols.push({ h: 'allocated', n: true, get: function (r, m) { return m ? '' : fmtBytes(r.allocated); } });
    cols.push({ h: 'share', n: true, get: function (r) { return pct(r.bytes, live); } },
              { h: 'allocations', n: true, get: function (r, m) { return m ? '' : String(r.allocations); } },
              { h: 'site', site: true, get: function (r, m) { return m ? '(other sites)' : r.site; } });
    table(sites, cols, e.live_by_site, e.live_other_bytes ? { sites: 1, bytes: e.live_other_bytes } : null,
          'nothing live');
    var wi = el('div', { 'class': 'oomwhatif' });
    body.appendChild(wi);
    if (!e.whatif.length) {
      wi.appendChild(el('p', { 'class': 'hint' }, "whatif: the failed request is none its models serve (an allocation outside PyTorch's allocator)"));
      return;
    }
    if (e.whatif_device_memory === null) {
      wi.appendChild(el('p', { 'class': 'hint' }, "whatif: the device's size is unknown, so no model can say whether it would have fit"));
      return;
    }
    wi.appendChild(el('h4', null, 'whatif: the same requests with ' + fmtBytes(e.whatif_device_memory) +
                      ' for them (the device less the memory beyond the trace), then the failed one'));
    table(wi, [{ h: 'setting', get: function (r) { return r.policy; } },
               { h: 'the failed request', cls: function (r) { return 'verdict ' + (r.earlier ? 'earlier' : r.fits ? 'fits' : 'fails'); },
                 get: function (r) { return r.earlier ? 'out of memory earlier' : r.fits ? 'fits' : 'fails'; } },
               { h: 'peak reserved', n: true, get: function (r) { return fmtBytes(r.peak_reserved); },
                 exact: function (r) { return fmtExact(r.peak_reserved); } }],
          e.whatif, null, '');
  }

  /* ---- the timeline ------------------------------------------------------------ */

  function Timeline(sec, t, index) {
    this.t = t;
    this.tl = t.timeline;
    this.index = index;
    this.sites = this.tl.sites;
    this.nb = this.tl.bands.length;          /* sites + other */
    this.lo = 0;
    this.hi = t.duration_ns || this.tl.bucket_ns * this.tl.buckets;
    this.focus = -1;
    var bar = el('div', { 'class': 'chartbar' });
    var reset = el('button', { type: 'button' }, 'reset zoom');
    bar.appendChild(reset);
    bar.appendChild(el('span', { 'class': 'hint' },
      'drag across the chart to zoom; hover a band for its site and stack'));
    sec.appendChild(bar);
    this.svg = sel('svg', { 'class': 'timeline', height: 340, 'data-trace': index });
    sec.appendChild(this.svg);
    this.legend = el('div', { 'class': 'legend' });
    sec.appendChild(this.legend);
    var self = this;
    reset.addEventListener('click', function () { self.zoom(null, null); });
    this.svg.addEventListener('dblclick', function () { self.zoom(null, null); });
    this.drawLegend();
    this.bind();
  }

  Timeline.prototype.domain = function () {
    if (shared.on && shared.lo !== null) return [shared.lo, shared.hi];
    if (shared.on && shared.max) return [0, shared.max];
    return [this.lo, this.hi];
  };

  Timeline.prototype.zoom = function (lo, hi) {
    if (shared.on) {
      shared.lo = lo; shared.hi = hi;
      shared.views.forEach(function (v) { v.draw(); });
      return;
    }
    this.lo = lo === null ? 0 : lo;
    this.hi = hi === null ? (this.t.duration_ns || this.tl.bucket_ns * this.tl.buckets) : hi;
    this.draw();
  };

  Timeline.prototype.drawLegend = function () {
    var self = this, lg = this.legend, tl = this.tl;
    lg.textContent = '';
    var peak = this.t.summary.peak_requested;
    this.sites.forEach(function (s, i) {
      var it = el('span', { 'class': 'item', 'data-band': i });
      var sw = el('span', { 'class': 'sw' });
      sw.style.background = color(i, self.nb - 1);
      it.appendChild(sw);
      it.appendChild(document.createTextNode(s.site + ' \u2014 ' + fmtBytes(s.bytes) +
                                             ' (' + pct(s.bytes, peak) + ')'));
      it.addEventListener('mouseenter', function () { self.focus = i; self.highlight(); });
      it.addEventListener('mouseleave', function () { self.focus = -1; self.highlight(); });
      lg.appendChild(it);
    });
    var other = el('span', { 'class': 'item', 'data-band': 'other' });
    var sw = el('span', { 'class': 'sw' });
    sw.style.background = OTHER;
    other.appendChild(sw);
    other.appendChild(document.createTextNode('other sites'));
    lg.appendChild(other);
    [['allocated', 'var(--allocated)', tl.allocated],
     ['reserved', 'var(--reserved)', tl.reserved],
     ['device used (driver): above reserved is beyond the trace', 'var(--used)',
      tl.device_used.some(function (v) { return v !== null; }) ? [1] : null]]
      .forEach(function (l) {
        if (!l[2]) return;
        var it = el('span', { 'class': 'item' }), s = el('span', { 'class': 'sw ln' });
        s.style.background = l[1];
        it.appendChild(s);
        it.appendChild(document.createTextNode(l[0]));
        lg.appendChild(it);
      });
    if (tl.ooms.length) {
      var it = el('span', { 'class': 'item' }), s2 = el('span', { 'class': 'sw' });
      s2.style.background = 'var(--oom)';
      it.appendChild(s2);
      it.appendChild(document.createTextNode('out of memory (' + this.t.summary.ooms + ')'));
      lg.appendChild(it);
    }
  };

  Timeline.prototype.highlight = function () {
    var f = this.focus;
    this.svg.querySelectorAll('path.band').forEach(function (p) {
      var b = p.getAttribute('data-band');
      p.classList.toggle('dim', f >= 0 && b !== String(f));
    });
  };

  /* Pixel columns over buckets [a, b), each at least a pixel wide (so the
   * pointer can rest on any): per column the bucket with the
   * largest requested total (its bands add up to it), and the largest of
   * each line. */
  Timeline.prototype.columns = function (a, b, width) {
    var tl = this.tl, cols = [], n = b - a, ncol = Math.max(1, Math.min(n, Math.floor(width)));
    if (n <= 0) return cols;
    for (var c = 0; c < ncol; c++) {
      var i0 = a + Math.floor(c * n / ncol), i1 = a + Math.floor((c + 1) * n / ncol);
      if (i1 <= i0) i1 = i0 + 1;
      var best = i0, al = 0, re = 0, du = null;
      for (var i = i0; i < i1; i++) {
        if (tl.requested[i] > tl.requested[best]) best = i;
        if (tl.allocated[i] > al) al = tl.allocated[i];
        if (tl.reserved[i] > re) re = tl.reserved[i];
        if (tl.device_used[i] !== null && (du === null || tl.device_used[i] > du))
          du = tl.device_used[i];
      }
      cols.push({ i0: i0, i1: i1, best: best, req: tl.requested[best], al: al, re: re, du: du });
    }
    return cols;
  };

  Timeline.prototype.draw = function () {
    var svg = this.svg, tl = this.tl, self = this;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var W = svg.clientWidth || svg.parentNode.clientWidth || 900, H = 340;
    var m = { l: 78, r: 12, t: 14, b: 28 };
    var pw = Math.max(50, W - m.l - m.r), ph = H - m.t - m.b;
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    var dom = this.domain(), bns = tl.bucket_ns;
    var a = Math.max(0, Math.floor(dom[0] / bns)), b = Math.min(tl.buckets, Math.ceil(dom[1] / bns));
    if (b <= a) b = Math.min(tl.buckets, a + 1);
    this.view = { a: a, b: b, lo: dom[0], hi: dom[1], m: m, pw: pw, ph: ph };
    if (tl.buckets === 0) {
      var tx = sel('text', { x: m.l + 10, y: m.t + 20 });
      tx.textContent = 'no device memory events';
      svg.appendChild(tx);
      return;
    }
    function X(ns) { return m.l + (ns - dom[0]) / (dom[1] - dom[0] || 1) * pw; }
    /* columns over the pixels this trace's buckets cover (on a shared
     * axis, a shorter trace ends before the plot does) */
    var cols = this.columns(a, b, X(b * bns) - X(a * bns));
    cols.forEach(function (c) {
      c.x0 = Math.max(m.l, X(c.i0 * bns));
      c.x1 = Math.min(m.l + pw, X(c.i1 * bns));
    });
    this.cols = cols;
    if (!cols.length) {
      var nt = sel('text', { x: m.l + 10, y: m.t + 20 });
      nt.textContent = 'this trace has no events in this range';
      svg.appendChild(nt);
    }
    var max = 1;
    cols.forEach(function (c) { max = Math.max(max, c.req, c.al, c.re, c.du || 0); });
    var ticks = byteTicks(max);
    var top = Math.max(max, ticks[ticks.length - 1]);
    this.view.top = top;
    function Y(v) { return m.t + ph - v / top * ph; }
    this.X = X; this.Y = Y;
    /* axes */
    var ax = sel('g', { 'class': 'axis' });
    ticks.forEach(function (v) {
      ax.appendChild(sel('line', { x1: m.l, x2: m.l + pw, y1: Y(v), y2: Y(v) }));
      var tx = sel('text', { x: m.l - 6, y: Y(v) + 4, 'text-anchor': 'end' });
      tx.textContent = fmtBytes(v);
      ax.appendChild(tx);
    });
    var step = niceStep((dom[1] - dom[0]) / 1e9, 7) * 1e9;
    for (var s = Math.ceil(dom[0] / step) * step; s <= dom[1] && step > 0; s += step) {
      var tx = sel('text', { x: X(s), y: H - 8, 'text-anchor': 'middle' });
      tx.textContent = fmtTime(s);
      ax.appendChild(tx);
    }
    svg.appendChild(ax);
    /* phases (push/pop ranges) in a strip at the top, marks as lines */
    var marks = tl.marks, g = sel('g', { 'class': 'marks' });
    marks.forEach(function (mk) {
      if (mk.end < dom[0] || mk.at > dom[1]) return;
      if (mk.phase) {
        var r = sel('rect', { 'class': 'phase', x: Math.max(m.l, X(mk.at)), y: m.t + 2 + 5 * Math.min(mk.depth, 4),
                               width: Math.max(1, Math.min(m.l + pw, X(mk.end)) - Math.max(m.l, X(mk.at))),
                               height: 4, 'data-name': mk.name });
        g.appendChild(r);
      } else {
        g.appendChild(sel('line', { 'class': 'mark', x1: X(mk.at), x2: X(mk.at), y1: m.t, y2: m.t + ph,
                                    'data-name': mk.name }));
      }
    });
    /* stacked bands: band 0 (the largest at the peak) at the bottom */
    var nb = this.nb, cum = cols.map(function () { return 0; });
    var colX = function (k) { return k < cols.length ? cols[k].x0 : cols[cols.length - 1].x1; };
    for (var bi = 0; bi < nb; bi++) {
      var band = tl.bands[bi], upper = [], any = false;
      for (var k = 0; k < cols.length; k++) {
        var v = band[cols[k].best];
        if (v > 0) any = true;
        upper.push(cum[k] + v);
      }
      if (any) {
        var d = 'M' + colX(0) + ',' + Y(cum[0]);
        for (k = 0; k < cols.length; k++)
          d += 'L' + colX(k) + ',' + Y(upper[k]) + 'L' + colX(k + 1) + ',' + Y(upper[k]);
        for (k = cols.length - 1; k >= 0; k--)
          d += 'L' + colX(k + 1) + ',' + Y(cum[k]) + 'L' + colX(k) + ',' + Y(cum[k]);
        var p = sel('path', { 'class': 'band' + (bi === nb - 1 ? ' other' : ' site'),
                              d: d + 'Z', fill: color(bi, nb - 1),
                              'data-band': bi === nb - 1 ? 'other' : String(bi) });
        svg.appendChild(p);
      }
      cum = upper;
    }
    svg.appendChild(g);
    /* lines */
    function line(cls, get) {
      var d = '', pen = false;
      for (var k = 0; k < cols.length; k++) {
        var v = get(cols[k]);
        if (v === null) { pen = false; continue; }
        d += (pen ? 'L' : 'M') + colX(k) + ',' + Y(v) + 'L' + colX(k + 1) + ',' + Y(v);
        pen = true;
      }
      if (d) svg.appendChild(sel('path', { 'class': 'line ' + cls, d: d }));
    }
    line('allocated', function (c) { return c.al; });
    line('reserved', function (c) { return c.re; });
    line('device_used', function (c) { return c.du; });
    /* the peak and the out-of-memory events */
    var pk = this.t.summary.peak_requested_at_ns;
    if (pk >= dom[0] && pk <= dom[1] && cols.length) {
      svg.appendChild(sel('line', { 'class': 'peak', x1: X(pk), x2: X(pk), y1: m.t, y2: m.t + ph }));
      var pt = sel('text', { x: Math.min(X(pk) + 4, m.l + pw - 120), y: m.t + 12, 'class': 'peaklabel',
                             'font-size': 11 });
      pt.textContent = 'peak ' + fmtBytes(this.t.summary.peak_requested);
      svg.appendChild(pt);
      /* where the peak column's bands lie (for the test and the curious) */
      var pc = this.colAt(X(pk));
      svg.setAttribute('data-peak-x0', cols[pc].x0);
      svg.setAttribute('data-peak-x1', cols[pc].x1);
      var acc = 0, best = cols[pc].best;
      svg.querySelectorAll('path.band').forEach(function (p) {
        var bi2 = p.getAttribute('data-band') === 'other' ? nb - 1 : +p.getAttribute('data-band');
        var lo = 0;
        for (var j = 0; j < bi2; j++) lo += tl.bands[j][best];
        var hi = lo + tl.bands[bi2][best];
        p.setAttribute('data-peak-y0', Y(hi));
        p.setAttribute('data-peak-y1', Y(lo));
        acc += hi - lo;
      });
    }
    tl.ooms.forEach(function (o) {
      if (o.at < dom[0] || o.at > dom[1]) return;
      var x = X(o.at);
      svg.appendChild(sel('line', { 'class': 'oom', x1: x, x2: x, y1: m.t, y2: m.t + ph }));
      svg.appendChild(sel('path', { 'class': 'oom', d: 'M' + (x - 5) + ',' + (m.t + ph) + 'l5,-8l5,8z' }));
    });
    this.cursor = sel('line', { 'class': 'cursor', y1: m.t, y2: m.t + ph, x1: -10, x2: -10 });
    svg.appendChild(this.cursor);
    this.selRect = sel('rect', { 'class': 'sel', y: m.t, height: ph, x: 0, width: 0, visibility: 'hidden' });
    svg.appendChild(this.selRect);
    this.highlight();
  };

  /* What lies under the pointer: the column, and the band at its height
   * (or a mark or an out-of-memory event near it). */
  Timeline.prototype.hit = function (ev) {
    var r = this.svg.getBoundingClientRect(), v = this.view;
    if (!v || !this.cols) return null;
    var x = ev.clientX - r.left, y = ev.clientY - r.top;
    if (x < v.m.l || x > v.m.l + v.pw || y < v.m.t || y > v.m.t + v.ph) return null;
    var k = this.colAt(x);
    if (k < 0) return null;
    var col = this.cols[k], val = (v.m.t + v.ph - y) / v.ph * v.top, acc = 0, band = -1;
    for (var b = 0; b < this.nb; b++) {
      var bv = this.tl.bands[b][col.best];
      if (val >= acc && val < acc + bv) { band = b; break; }
      acc += bv;
    }
    return { x: x, y: y, col: col, band: band, bytes: band >= 0 ? this.tl.bands[band][col.best] : 0 };
  };

  /* The pointer's x in the plot area; null outside it. */
  Timeline.prototype.plotX = function (ev) {
    var r = this.svg.getBoundingClientRect(), v = this.view;
    if (!v) return null;
    var x = ev.clientX - r.left, y = ev.clientY - r.top;
    return x < v.m.l || x > v.m.l + v.pw || y < v.m.t || y > v.m.t + v.ph ? null : x;
  };

  /* The column drawn at pixel x; -1 if none (past the trace's end). */
  Timeline.prototype.colAt = function (x) {
    var c = this.cols, lo = 0, hi = c.length - 1;
    if (!c.length || x < c[0].x0 || x > c[hi].x1) return -1;
    while (lo < hi) {
      var mid = (lo + hi + 1) >> 1;
      if (c[mid].x0 <= x) lo = mid; else hi = mid - 1;
    }
    return lo;
  };

  Timeline.prototype.bind = function () {
    var self = this, svg = this.svg, drag = null;
    svg.addEventListener('mousemove', function (ev) {
      var h = self.hit(ev), px = self.plotX(ev);
      if (drag !== null && px !== null) {
        var x0 = Math.min(drag, px), x1 = Math.max(drag, px);
        self.selRect.setAttribute('x', x0);
        self.selRect.setAttribute('width', x1 - x0);
        self.selRect.setAttribute('visibility', 'visible');
      }
      if (!h) { hideTip(); self.focus = -1; self.highlight(); return; }
      self.cursor.setAttribute('x1', h.x);
      self.cursor.setAttribute('x2', h.x);
      var tl = self.tl, c = h.col, bns = tl.bucket_ns;
      var when = fmtTime(c.i0 * bns) + (c.i1 - c.i0 > 1 || true ? ' \u2013 ' + fmtTime(c.i1 * bns) : '');
      var lines = ['time ' + when, 'requested ' + fmtBytes(c.req) + ' (' + fmtExact(c.req) + ')'];
      if (c.re) lines.push('reserved ' + fmtBytes(c.re) + ', allocated ' + fmtBytes(c.al));
      if (c.du !== null) lines.push('device used (driver) ' + fmtBytes(c.du) +
                                    (c.du > c.re ? ', ' + fmtBytes(c.du - c.re) + ' beyond the trace' : ''));
      var near = self.nearby(h.x);
      near.forEach(function (n) { lines.push(n); });
      if (h.band >= 0 && h.band < self.sites.length) {
        var s = self.sites[h.band];
        lines.unshift(fmtBytes(h.bytes) + ' (' + fmtExact(h.bytes) + ') live, ' +
                      pct(h.bytes, c.req) + ' of requested');
        showTip(ev, s.site, lines, frames(s.stack));
      } else if (h.band >= 0) {
        lines.unshift(fmtBytes(h.bytes) + ' (' + fmtExact(h.bytes) + ') live');
        showTip(ev, 'other sites', lines, null);
      } else {
        showTip(ev, self.t.path, lines, null);
      }
      if (self.focus !== h.band) { self.focus = h.band; self.highlight(); }
    });
    svg.addEventListener('mouseleave', function () {
      hideTip(); self.focus = -1; self.highlight();
      if (self.cursor) self.cursor.setAttribute('x1', -10), self.cursor.setAttribute('x2', -10);
    });
    svg.addEventListener('mousedown', function (ev) {
      var px = self.plotX(ev);
      if (px !== null && ev.button === 0) { drag = px; ev.preventDefault(); }
    });
    window.addEventListener('mouseup', function (ev) {
      if (drag === null) return;
      var r = svg.getBoundingClientRect(), v = self.view, x = ev.clientX - r.left;
      var x0 = Math.max(v.m.l, Math.min(drag, x)), x1 = Math.min(v.m.l + v.pw, Math.max(drag, x));
      drag = null;
      self.selRect.setAttribute('visibility', 'hidden');
      if (x1 - x0 < 4) return;
      var span = v.hi - v.lo;
      var lo = v.lo + (x0 - v.m.l) / v.pw * span, hi = v.lo + (x1 - v.m.l) / v.pw * span;
      if (hi - lo < self.tl.bucket_ns) hi = lo + self.tl.bucket_ns;
      self.zoom(lo, hi);
    });
  };

  /* Marks, phases and out-of-memory events within a few pixels of x. */
  Timeline.prototype.nearby = function (x) {
    var out = [], self = this, tl = this.tl;
    tl.ooms.forEach(function (o) {
      if (Math.abs(self.X(o.at) - x) <= 4 && out.length < 6)
        out.push('OUT OF MEMORY: ' + fmtBytes(o.size) + ' on device ' + o.device + ' at ' + o.site);
    });
    tl.marks.forEach(function (mk) {
      if (out.length >= 6) return;
      if (mk.phase ? (self.X(mk.at) <= x && x <= self.X(mk.end)) : Math.abs(self.X(mk.at) - x) <= 3)
        out.push((mk.phase ? 'phase ' : 'mark ') + mk.name + ' at ' + fmtTime(mk.at) +
                 (mk.phase ? ' \u2013 ' + fmtTime(mk.end) : ''));
    });
    return out;
  };

  /* ---- the flame graph ------------------------------------------------------------ */

  function buildTree(folds) {
    var root = { name: 'all', value: 0, children: {}, list: null };
    folds.forEach(function (f) {
      var node = root, parts = f[0] ? f[0].split(';') : ['(no stack)'];
      root.value += f[1];
      parts.forEach(function (p) {
        var c = node.children[p];
        if (!c) c = node.children[p] = { name: p, value: 0, children: {}, list: null, parent: node };
        c.value += f[1];
        node = c;
      });
    });
    (function sort(n) {
      n.list = Object.keys(n.children).map(function (k) { return n.children[k]; })
        .sort(function (a, b) { return b.value - a.value || (a.name < b.name ? -1 : 1); });
      n.list.forEach(sort);
    })(root);
    return root;
  }

  function Flame(sec, t) {
    this.t = t;
    this.trees = { peak: buildTree(t.flame.peak), total: buildTree(t.flame.total) };
    this.which = 'peak';
    this.zoomed = null;
    var bar = el('div', { 'class': 'chartbar' }), self = this;
    this.btn = {};
    [['peak', 'bytes at the peak'], ['total', 'all bytes allocated']].forEach(function (w) {
      var b = el('button', { type: 'button', 'data-which': w[0] }, w[1]);
      b.addEventListener('click', function () { self.which = w[0]; self.zoomed = null; self.draw(); });
      bar.appendChild(b);
      self.btn[w[0]] = b;
    });
    bar.appendChild(el('span', { 'class': 'hint' }, 'click a frame to zoom into it, click the top bar to zoom out'));
    sec.appendChild(bar);
    this.svg = sel('svg', { 'class': 'flame' });
    sec.appendChild(this.svg);
  }

  Flame.prototype.draw = function () {
    var svg = this.svg, self = this, root = this.trees[this.which];
    for (var k in this.btn) this.btn[k].classList.toggle('on', k === this.which);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var W = svg.clientWidth || svg.parentNode.clientWidth || 900, RH = 18;
    var start = this.zoomed || root, rows = [];
    /* the path from the root to the zoomed frame stays on top, full width */
    var path = [];
    for (var n = start; n; n = n.parent) path.unshift(n);
    if (root.value === 0) {
      svg.setAttribute('height', 30);
      var tx = sel('text', { x: 4, y: 18 });
      tx.textContent = 'no device memory ' + (this.which === 'peak' ? 'live at the peak' : 'allocated');
      svg.appendChild(tx);
      return;
    }
    var maxDepth = 0;
    function place(node, x, w, depth) {
      if (w < 0.6) return;
      rows.push({ n: node, x: x, w: w, d: depth });
      if (depth > maxDepth) maxDepth = depth;
      var cx = x;
      node.list.forEach(function (c) {
        var cw = w * c.value / node.value;
        place(c, cx, cw, depth + 1);
        cx += cw;
      });
    }
    path.forEach(function (p, i) { if (i < path.length - 1) rows.push({ n: p, x: 0, w: W, d: i }); });
    place(start, 0, W, path.length - 1);
    var H = (maxDepth + 1) * RH + 2;
    svg.setAttribute('height', H);
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    var total = root.value;
    rows.forEach(function (r) {
      var g = sel('g'), hue = r.n === root ? 0 : (hash(r.n.name) % 40);
      var rect = sel('rect', { x: r.x, y: r.d * RH, width: Math.max(0.5, r.w - 0.5), height: RH - 1,
                               fill: r.n === root ? '#cbd5e1' : 'hsl(' + (15 + hue) + ',' + (70 + hash(r.n.name) % 20) + '%,' + (58 + (hash(r.n.name) >> 3) % 14) + '%)',
                               'data-name': r.n.name });
      g.appendChild(rect);
      if (r.w > 30) {
        var tx = sel('text', { x: r.x + 3, y: r.d * RH + 13 });
        var chars = Math.floor((r.w - 6) / 6.5);
        tx.textContent = r.n.name.length > chars ? r.n.name.slice(0, Math.max(0, chars - 1)) + '\u2026' : r.n.name;
        g.appendChild(tx);
      }
      rect.addEventListener('mousemove', function (ev) {
        showTip(ev, r.n.name, [fmtBytes(r.n.value) + ' (' + fmtExact(r.n.value) + '), ' +
                               pct(r.n.value, total) + ' of ' + (self.which === 'peak' ? 'the peak' : 'all allocated')]);
      });
      rect.addEventListener('mouseleave', hideTip);
      rect.addEventListener('click', function () {
        if (r.n === root) self.zoomed = null;
        else if (r.n === self.zoomed) self.zoomed = r.n.parent === root ? null : r.n.parent;
        else self.zoomed = r.n;
        hideTip();
        self.draw();
      });
      svg.appendChild(g);
    });
  };

  function hash(s) {
    var h = 0;
    for (var i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0;
    return Math.abs(h);
  }

  /* ---- the pool's segments ---------------------------------------------------------- */

  function pools(sec, t) {
    if (!t.pools.length) {
      sec.appendChild(el('p', { 'class': 'empty' }, 'no device allocations'));
      return;
    }
    var tabs = el('div', { 'class': 'tabs' }), body = el('div');
    sec.appendChild(tabs);
    sec.appendChild(body);
    var buttons = [];
    t.pools.forEach(function (p, i) {
      var b = el('button', { type: 'button' }, p.what === 'peak' ? 'at the peak (' + fmtTime(p.at) + ')'
                 : 'out of memory #' + i + ' (' + fmtBytes(p.size) + ' at ' + fmtTime(p.at) + ')');
      b.addEventListener('click', function () { show(i); });
      tabs.appendChild(b);
      buttons.push(b);
    });
    function show(i) {
      buttons.forEach(function (b, j) { b.classList.toggle('on', i === j); });
      body.textContent = '';
      var p = t.pools[i];
      if (!p.taken) { body.appendChild(el('p', { 'class': 'empty' }, 'not enough memory to picture it')); return; }
      var cards = el('div', { 'class': 'cards' });
      if (p.segments.length || p.segments_omitted) {
        card(cards, 'reserved', fmtBytes(p.reserved), (p.segments.length + p.segments_omitted) + ' segments');
        card(cards, 'allocated', fmtBytes(p.allocated), p.live_blocks + ' live blocks');
        card(cards, 'pending', fmtBytes(p.pending), 'freed, not yet reusable');
        card(cards, 'free', fmtBytes(p.free), p.free_blocks + ' blocks, largest ' + fmtBytes(p.largest_free));
        card(cards, 'fragmentation', (100 * p.fragmentation).toFixed(1) + '%', '1 \u2212 largest free / free');
      }
      card(cards, 'rounding waste', fmtBytes(p.waste), 'block \u2212 requested bytes');
      if (p.unpooled_count) card(cards, 'outside the pool', fmtBytes(p.unpooled), p.unpooled_count + ' allocations');
      body.appendChild(cards);
      if (!p.segments.length) {
        body.appendChild(el('p', { 'class': 'empty' }, t.pool || t.framework ? 'no segments held then' :
          'recorded without the pool: the driver did the caching, out of the trace\'s sight'));
        return;
      }
      var lg = el('div', { 'class': 'legend' });
      [['a', 'allocated'], ['p', 'pending'], ['f', 'free']].forEach(function (k) {
        var it = el('span', { 'class': 'item' }), s = el('span', { 'class': 'sw' });
        s.style.background = 'var(--' + { a: 'alloc', p: 'pending', f: 'free' }[k[0]] + '-seg)';
        it.appendChild(s); it.appendChild(document.createTextNode(k[1]));
        lg.appendChild(it);
      });
      lg.appendChild(el('span', { 'class': 'hint' }, 'one box per segment, by address, width by size; within a box its blocks and free runs, in address order (hover for the site)'));
      body.appendChild(lg);
      var segs = p.segments.slice().sort(function (a, b) {
        return a[1] - b[1] || (BigIntish(a[0]) < BigIntish(b[0]) ? -1 : 1);
      });
      var biggest = 1;
      segs.forEach(function (s) { biggest = Math.max(biggest, s[2]); });
      var map = el('div', { 'class': 'segmap' }), full = Math.max(200, (sec.clientWidth || 900) * 0.6);
      segs.forEach(function (s) {
        var box = el('div', { 'class': 'seg', 'data-addr': s[0] });
        var px = Math.max(6, Math.sqrt(s[2] / biggest) * full);
        box.style.width = px + 'px';
        var pieces = s[10] || [];
        if (!pieces.length) pieces = [s[2], s[3], s[4], -1];
        for (var k = 0, off = 0; k + 3 < pieces.length; k += 4) {
          var size = pieces[k], a = pieces[k + 1], pe = pieces[k + 2], site = pieces[k + 3];
          box.appendChild(piece(t, s, off, size, a, pe, site, px * size / s[2]));
          off += size;
        }
        box.addEventListener('mouseleave', hideTip);
        map.appendChild(box);
      });
      body.appendChild(map);
      if (p.segments_omitted)
        body.appendChild(el('p', { 'class': 'hint' }, p.segments_omitted + ' more segments not drawn'));
    }
    show(0);
  }
  /* One piece of a segment's map: a block, a free run, or neighbours
   * merged where the segment has more than the map draws (their shares
   * then stack inside the piece). */
  function piece(t, s, off, size, a, pe, site, px) {
    var d = el('div', { 'class': 'pc' + (px >= 4 ? ' edge' : '') });
    d.style.width = (100 * size / s[2]) + '%';
    var f = size - a - pe, kind = a === size ? 'a' : pe === size ? 'p' : f === size ? 'f' : '';
    if (kind) {
      d.classList.add(kind);
    } else {
      var x = 100 * a / size, y = 100 * (a + pe) / size;
      d.style.background = 'linear-gradient(to right, var(--alloc-seg) 0 ' + x + '%, var(--pending-seg) ' +
        x + '% ' + y + '%, var(--free-seg) ' + y + '% 100%)';
    }
    d.addEventListener('mousemove', function (ev) {
      var b = site >= 0 ? t.block_sites[site] : null;
      var what = kind === 'a' ? 'allocated block' : kind === 'p' ? 'pending block (freed, not yet reusable)' :
        kind === 'f' ? 'free' : 'several blocks, merged to fit';
      var lines = [fmtBytes(size) + ' (' + fmtExact(size) + ') at +' + fmtExact(off)];
      if (!kind) lines.push('allocated ' + fmtBytes(a) + ', pending ' + fmtBytes(pe) + ', free ' + fmtBytes(f));
      if (b) lines.push((kind === 'a' ? 'site ' : 'largest block from ') + b.site);
      if (b && b.held_by) b.held_by.forEach(function (h) { lines.push("the site's memory " + heldText(h)); });
      lines.push('segment ' + s[0] + (s[9] ? " (PyTorch's)" : '') + ' on device ' + s[1] + ', ' +
                 fmtBytes(s[2]) + ': allocated ' + fmtBytes(s[3]) + ' in ' + s[8] + ' blocks, pending ' +
                 fmtBytes(s[4]) + ', free ' + fmtBytes(s[5]) + ' in ' + s[7] + ' gaps, largest ' + fmtBytes(s[6]));
      showTip(ev, what, lines, b ? b.stack : null);
    });
    return d;
  }
  /* addresses are hex strings; same-length comparison orders them */
  function BigIntish(h) { return ('0000000000000000' + h.slice(2)).slice(-16); }

  /* ---- tables ------------------------------------------------------------------------ */

  /* A retention chain for reading, as `gpumemreport retention` writes it:
   * attribute and item steps follow the step before them, others after
   * an arrow. */
  function chainText(steps) {
    var out = '';
    steps.forEach(function (s) {
      if (out && !/^[.[{]/.test(s)) out += ' \u2192 ';
      out += s;
    });
    return out;
  }
  function heldText(h) {
    return 'held by ' + chainText(h.chain) + ': ' + fmtBytes(h.bytes) + ' (capture ' + h.capture +
      ', ' + h.reason + '; it retains ' + fmtBytes(h.retained) + ' in all)';
  }

  function table(sec, cols, rows, more, empty) {
    if (!rows.length) { sec.appendChild(el('p', { 'class': 'empty' }, empty)); return; }
    var tb = el('table'), tr = el('tr');
    cols.forEach(function (c) { tr.appendChild(el('th', c.n ? { 'class': 'n' } : null, c.h)); });
    tb.appendChild(tr);
    function row(r, isMore) {
      var tr2 = el('tr');
      cols.forEach(function (c) {
        var v = c.get(r, isMore), td;
        if (c.site) {
          td = el('td', { 'class': 'site' });
          if (r.stack && !isMore) {
            var det = el('details'), sm = el('summary', null, v);
            det.appendChild(sm);
            det.appendChild(el('pre', null, frames(r.stack).join('\n')));
            td.appendChild(det);
          } else td.textContent = v;
        } else td = el('td', c.n ? { 'class': 'n', title: c.exact ? c.exact(r) : '' } :
                       c.cls ? { 'class': c.cls(r) } : null, v);
        tr2.appendChild(td);
      });
      tb.appendChild(tr2);
      /* who kept this site's memory alive, at a retention capture */
      (isMore ? [] : r.held_by || []).forEach(function (h) {
        var hr = el('tr', { 'class': 'held' });
        hr.appendChild(el('td', { colspan: String(cols.length) }, heldText(h)));
        tb.appendChild(hr);
      });
    }
    rows.forEach(function (r) { row(r, false); });
    if (more && more.sites) row(more, true);
    sec.appendChild(tb);
  }

  function tables(sec, t) {
    var tb = t.tables, peak = t.summary.peak_requested;
    var h = el('h3', null, 'At the peak: ' + fmtBytes(peak) + ' requested at ' + fmtTime(t.summary.peak_requested_at_ns));
    sec.appendChild(h);
    var rounded = tb.peak.some(function (r) { return r.allocated !== r.bytes; });
    var cols = [{ h: 'bytes', n: true, get: function (r) { return fmtBytes(r.bytes); }, exact: function (r) { return fmtExact(r.bytes); } }];
    if (rounded) cols.push({ h: 'allocated', n: true, get: function (r) { return fmtBytes(r.allocated); } });
    cols.push({ h: 'share', n: true, get: function (r) { return pct(r.bytes, peak); } },
              { h: 'allocations', n: true, get: function (r) { return String(r.allocations); } },
              { h: 'site', site: true, get: function (r, m) { return m ? '(' + r.sites + ' more sites)' : r.site; } });
    table(sec, cols, tb.peak, tb.peak_more, 'nothing live at the peak');
    sec.appendChild(el('h3', null, 'Live at exit' + (t.cut ? ' (the trace was cut short: the process did not exit)' : '')));
    table(sec, [{ h: 'bytes', n: true, get: function (r) { return fmtBytes(r.bytes); }, exact: function (r) { return fmtExact(r.bytes); } },
                { h: 'allocations', n: true, get: function (r) { return String(r.allocations); } },
                { h: 'pinned host', n: true, get: function (r) { return r.host ? fmtBytes(r.host) : ''; } },
                { h: 'site', site: true, get: function (r, m) { return m ? '(' + r.sites + ' more sites)' : r.site; } }],
          tb.leaks, tb.leaks_more, 'nothing left allocated');
    var g = tb.growth;
    sec.appendChild(el('h3', null, 'Growth' + (g.by === 'steps' ? ' per step (' + g.steps + ' steps; a step: ' +
      (/^mark "/.test(g.step_site) ? '' : 'one allocation at ') + g.step_site + ')' : ' over time')));
    var gc = g.by === 'steps' ? [{ h: 'per step', n: true, get: function (r) { return '+' + fmtBytes(r.per_step); } }]
                              : [{ h: 'rate', n: true, get: function (r) { return fmtBytes(r.bytes_per_s) + '/s'; } }];
    gc.push({ h: 'rise', n: true, get: function (r) { return fmtBytes(r.rise); } },
            { h: 'from', n: true, get: function (r) { return fmtBytes(r.from); } },
            { h: 'to', n: true, get: function (r) { return fmtBytes(r.to); } },
            { h: 'site', site: true, get: function (r) { return r.site; } });
    table(sec, gc, g.rows, null, 'no site grows steadily');
    var tr = tb.transfers;
    sec.appendChild(el('h3', null, 'Transfers'));
    var dirs = tr.directions.slice();
    if (tr.sets.count) dirs.push({ direction: 'memset', host_memory: '', bytes: tr.sets.bytes, count: tr.sets.count });
    table(sec, [{ h: 'direction', get: function (r) { return r.direction; } },
                { h: 'host memory', get: function (r) { return r.host_memory; } },
                { h: 'bytes', n: true, get: function (r) { return fmtBytes(r.bytes); }, exact: function (r) { return fmtExact(r.bytes); } },
                { h: 'count', n: true, get: function (r) { return String(r.count); } },
                { h: 'average', n: true, get: function (r) { return fmtBytes(Math.round(r.bytes / r.count)); } }],
          dirs, null, 'no copies or sets');
    if (tr.sites.length)
      table(sec, [{ h: 'copied', n: true, get: function (r) { return fmtBytes(r.copy_bytes); } },
                  { h: 'copies', n: true, get: function (r) { return String(r.copies); } },
                  { h: 'H2D', n: true, get: function (r) { return fmtBytes(r.h2d_bytes); } },
                  { h: 'D2H', n: true, get: function (r) { return fmtBytes(r.d2h_bytes); } },
                  { h: 'set', n: true, get: function (r) { return fmtBytes(r.set_bytes); } },
                  { h: 'site', site: true, get: function (r, m) { return m ? '(' + r.sites + ' more sites)' : r.site; } }],
            tr.sites, tr.sites_more, '');
  }

  /* ---- the page ------------------------------------------------------------------------ */

  function build() {
    var main = document.getElementById('traces'), nav = document.getElementById('tracenav');
    main.textContent = '';
    if (!traces.length) { main.appendChild(el('p', { 'class': 'empty' }, 'no traces')); return; }
    shared.max = 0;
    traces.forEach(function (t) { shared.max = Math.max(shared.max, t.duration_ns); });
    var flames = [];
    traces.forEach(function (t, i) {
      var sec = el('section', { 'class': 'trace', id: 'trace-' + i });
      sec.appendChild(el('h2', null, t.path));
      sec.appendChild(el('div', { 'class': 'sub' }, 'pid ' + t.pid + (t.host ? ' on ' + t.host : '') +
                         (t.cmdline ? ': ' + t.cmdline : '')));
      if (t.cut) sec.appendChild(el('div', { 'class': 'sub warn' }, 'the process ended without closing the trace: read up to its last complete event'));
      if (t.damage) sec.appendChild(el('div', { 'class': 'sub warn' }, 'damaged trace, read where intact: ' + t.damage));
      if (t.lost) sec.appendChild(el('div', { 'class': 'sub warn' }, 'incomplete trace: ' + t.lost));
      if (t.fw_missing) sec.appendChild(el('div', { 'class': 'sub warn' }, "PyTorch's bridge did not attach (" + t.fw_missing +
                                           "): the figures are PyTorch's segments as it took them from CUDA, not its tensors"));
      summary(sec, t);
      if (t.kinds) kinds(sec, t);
      ooms(sec, t);
      sec.appendChild(el('h3', null, 'Device memory over time, by site (top ' + t.timeline.sites.length + ' at the peak)'));
      var tv = new Timeline(sec, t, i);
      shared.views.push(tv);
      if (t.timeline.marks_total > t.timeline.marks.length)
        sec.appendChild(el('p', { 'class': 'hint' }, t.timeline.marks.length + ' of ' + t.timeline.marks_total + ' marks drawn'));
      sec.appendChild(el('h3', null, 'Flame graph'));
      flames.push(new Flame(sec, t));
      sec.appendChild(el('h3', null, (t.framework && !t.pool ? "PyTorch's allocator" : 'The pool') + ': segments at the peak and at each out-of-memory event'));
      pools(sec, t);
      if (t.pool_odd) sec.appendChild(el('p', { 'class': 'hint' }, t.pool_odd + ' records did not fit the rebuilt pool: its figures may be off'));
      tables(sec, t);
      main.appendChild(sec);
      var a = el('a', { href: '#trace-' + i }, t.path.split('/').pop() + ' (pid ' + t.pid + ')');
      nav.appendChild(a);
    });
    if (traces.length > 1) {
      var box = document.getElementById('sharedbox'), cb = document.getElementById('shared');
      box.hidden = false;
      cb.addEventListener('change', function () {
        shared.on = cb.checked;
        shared.lo = shared.hi = null;
        shared.views.forEach(function (v) { v.lo = 0; v.hi = v.t.duration_ns || v.tl.bucket_ns * v.tl.buckets; v.draw(); });
      });
    }
    function redraw() {
      shared.views.forEach(function (v) { v.draw(); });
      flames.forEach(function (f) { f.draw(); });
    }
    redraw();
    var pending = null;
    window.addEventListener('resize', function () {
      if (pending) clearTimeout(pending);
      pending = setTimeout(redraw, 120);
    });
    document.body.setAttribute('data-ready', 'true');
  }

  build();
})();
