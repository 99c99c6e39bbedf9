// The test harness in the page: added to the shipped page by package
// firefox's own server (never shipped), it forwards what the page tells
// (its "notify" events) to that server and carries out the server's
// commands the way a user would — typing the token, clicking the buttons.
// Everything goes to the page's own origin; the page's policy allows
// nothing else.
'use strict';
(function () {
  const me = document.currentScript;
  // A screenshot browser is signed in by the site (the token stored before
  // the page runs), and reports nothing.
  if (me.dataset.token) localStorage.setItem('notify.token', me.dataset.token);
  if (me.dataset.mode !== 'drive') return;

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  async function report(obj) {
    try {
      await fetch('/harness/report', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(Object.assign({ from: 'page' }, obj)) });
    } catch (e) { /* the server is gone: the test is over */ }
  }

  // Every origin the page fetched anything from (scripts, style, fetch()).
  const origins = new Set();
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) origins.add(new URL(e.name).origin);
  }).observe({ type: 'resource', buffered: true });
  document.addEventListener('securitypolicyviolation', (ev) => {
    report({ type: 'csp-violation', message: ev.violatedDirective + ' blocked ' + ev.blockedURI });
  });

  const waiting = [];
  window.addEventListener('notify', (ev) => {
    const d = ev.detail || {};
    report(d);
    for (const w of waiting.slice()) {
      if (w.types.includes(d.type)) { waiting.splice(waiting.indexOf(w), 1); w.resolve(d); }
    }
  });
  // click presses a button of the page and waits for the page's answer.
  function click(id, types) {
    const answer = new Promise((resolve) => waiting.push({ types, resolve }));
    document.getElementById(id).click();
    return answer.then((d) => {
      if (d.type === 'error') throw new Error(d.message);
      return d;
    });
  }

  const withTimeout = (promise, ms, what) => Promise.race([promise, sleep(ms).then(() => { throw new Error(what + ' timed out'); })]);

  async function state() {
    const reg = await navigator.serviceWorker.getRegistration('./');
    const worker = reg && (reg.active || reg.waiting || reg.installing);
    let endpoint = '';
    if (reg) {
      try {
        const sub = await withTimeout(reg.pushManager.getSubscription(), 5000, 'getSubscription');
        if (sub) endpoint = sub.endpoint;
      } catch (e) { endpoint = '(' + e.message + ')'; }
    }
    return {
      origin: location.origin,
      href: location.href,
      stored_token: localStorage.getItem('notify.token') || '',
      input_token: document.getElementById('token').value,
      status: document.getElementById('status').textContent,
      script_url: worker ? worker.scriptURL : '',
      endpoint,
      origins: Array.from(origins),
    };
  }

  async function run(cmd) {
    switch (cmd.action) {
      case 'state': return { state: await state() };
      case 'sign-in': {
        const field = document.getElementById('token');
        field.value = cmd.token;
        field.dispatchEvent(new Event('change'));
        return {};
      }
      case 'subscribe': return { endpoint: (await click('subscribe', ['subscribed', 'error'])).endpoint };
      case 'unsubscribe': return { endpoint: (await click('unsubscribe', ['unsubscribed', 'error'])).endpoint };
      case 'unsubscribe-browser': {
        // As when the browser drops the subscription by itself (site data
        // cleared): the API is not told, the push service answers 410.
        const reg = await navigator.serviceWorker.ready;
        const sub = await reg.pushManager.getSubscription();
        if (!sub) throw new Error('no subscription in the browser');
        await sub.unsubscribe();
        return { endpoint: sub.endpoint };
      }
      case 'notifications': {
        const reg = await navigator.serviceWorker.ready;
        const shown = await reg.getNotifications(cmd.tag ? { tag: cmd.tag } : {});
        return { notifications: shown.map((n) => ({ title: n.title, body: n.body, tag: n.tag })) };
      }
      case 'settings': {
        // As a user fills the settings panel and saves it.
        const s = cmd.settings || {};
        const fields = { 'mute-courses': s.mute_courses, 'mute-types': s.mute_types, 'quiet-start': s.quiet_start, 'quiet-end': s.quiet_end, cap: s.cap };
        for (const [id, v] of Object.entries(fields)) document.getElementById(id).value = v || '';
        return { preferences: (await click('save-settings', ['settings', 'error'])).preferences };
      }
      case 'click-notification': {
        // A click on the shown notification: the worker's harness runs its
        // notificationclick handler on it (a headless browser has no
        // notification to click).
        const reg = await navigator.serviceWorker.ready;
        const answer = await new Promise((resolve) => {
          const ch = new MessageChannel();
          ch.port1.onmessage = (ev) => resolve(ev.data);
          reg.active.postMessage({ harness: 'click', tag: cmd.tag }, [ch.port2]);
        });
        if (!answer.ok) throw new Error(answer.error);
        return {};
      }
      case 'close-notifications': {
        const reg = await navigator.serviceWorker.ready;
        for (const n of await reg.getNotifications()) n.close();
        return {};
      }
      default: throw new Error('unknown command ' + cmd.action);
    }
  }

  async function loop() {
    for (;;) {
      let cmd = null;
      try {
        const r = await fetch('/harness/command'); // waits for one
        cmd = await r.json();
      } catch (e) { await sleep(500); continue; }
      if (!cmd || !cmd.action || cmd.action === 'none') continue;
      try {
        report(Object.assign({ type: 'result', action: cmd.action, id: cmd.id, ok: true }, await run(cmd)));
      } catch (e) {
        report({ type: 'result', action: cmd.action, id: cmd.id, ok: false, error: e.message });
      }
    }
  }

  document.addEventListener('DOMContentLoaded', async () => {
    // What the page made of its URL, before anyone signs in.
    await report({ type: 'loaded', user_agent: navigator.userAgent, state: await state() });
    loop();
  });
})();
