// notify's reference page: subscribe this browser to push, show the inbox.
// Plain JavaScript, no build step. See services/api/webapp (package doc).
'use strict';

// The token is the one the user typed into the page (or, on a real site,
// the one the site's own login hands over: see the package doc). Never the
// one in a link: /app/?token=… would sign this browser in as whoever made
// the link and send that account's pushes and inbox here.
let token = localStorage.getItem('notify.token') || '';
const linkedToken = new URLSearchParams(location.search).has('token');
if (linkedToken) {
  // Out of the address bar, and so out of the history and bookmarks.
  const u = new URL(location.href);
  u.searchParams.delete('token');
  history.replaceState(history.state, '', u.pathname + u.search + u.hash);
}

// The app this page subscribes for is the site's configuration:
// <meta name="notify-app" content="NAME"> (notify apps list), default the
// app the API's environment defines.
const appMeta = document.querySelector('meta[name="notify-app"]');
const appName = (appMeta && appMeta.content) || 'default';
const appKeyPath = appName === 'default' ? '/v1/vapid-public-key' : '/v1/apps/' + encodeURIComponent(appName) + '/vapid-public-key';

const $ = (id) => document.getElementById(id);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function withTimeout(promise, ms, what) {
  return Promise.race([promise, sleep(ms).then(() => { throw new Error(what + ' timed out'); })]);
}

// emit tells the document what the page did, as a "notify" event on
// window (detail: {type, …}), for a site that shows it in its own UI.
// Nothing leaves the page this way.
function emit(obj) {
  window.dispatchEvent(new CustomEvent('notify', { detail: obj }));
}

function say(message, isError) {
  const el = $('status');
  el.textContent = message;
  el.className = isError ? 'error' : '';
  emit({ type: isError ? 'error' : 'status', message });
}

async function api(path, opts = {}) {
  const headers = Object.assign({ Authorization: 'Bearer ' + token }, opts.headers || {});
  const r = await fetch(path, Object.assign({}, opts, { headers }));
  let body = null;
  try { body = await r.json(); } catch (e) { /* 204 and friends */ }
  if (!r.ok) {
    const e = body && body.error;
    throw new Error(e ? `${e.message} (${e.code}, HTTP ${r.status})` : `HTTP ${r.status} from ${path}`);
  }
  return body;
}

function base64urlToBytes(s) {
  const b64 = s.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (s.length % 4)) % 4);
  return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
}

function sameKey(a, b) {
  if (!a || a.byteLength !== b.byteLength) return false;
  const x = new Uint8Array(a);
  return x.every((v, i) => v === b[i]);
}

async function registration() {
  // Always the plain script URL: nothing from the page's URL reaches the
  // worker, which outlives the tab.
  await navigator.serviceWorker.register('sw.js', { scope: './' });
  return navigator.serviceWorker.ready;
}

// subscribe asks for permission, subscribes with the API's VAPID key and
// posts the subscription. A browser's push service may need a few seconds
// after start before it answers (Firefox drops earlier requests), so the
// browser calls are retried with a timeout each.
async function subscribe() {
  if (!token) throw new Error('enter an access token first');
  if (!('serviceWorker' in navigator) || !('PushManager' in window)) throw new Error('this browser has no Push API');
  const permission = await Notification.requestPermission();
  if (permission !== 'granted') throw new Error('notifications are blocked for this site: allow them in the browser\'s site settings, then try again');
  const reg = await registration();
  const { public_key: publicKey, key_id: keyID } = await api(appKeyPath);
  const key = base64urlToBytes(publicKey);
  let sub = null;
  for (let attempt = 1; ; attempt++) {
    try {
      sub = await withTimeout(reg.pushManager.getSubscription(), 5000, 'getSubscription');
      if (sub && !sameKey(sub.options.applicationServerKey, key)) {
        await sub.unsubscribe(); // made for another server key: useless now
        sub = null;
      }
      if (!sub) sub = await withTimeout(reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key }), 10000, 'subscribe');
      break;
    } catch (e) {
      if (attempt >= 20) throw e;
      say(`waiting for the browser's push service (${e.message}), attempt ${attempt}…`);
      await sleep(1000);
    }
  }
  const json = sub.toJSON();
  await api('/v1/me/push-subscriptions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(appName === 'default' ? { endpoint: json.endpoint, keys: json.keys }
      : { endpoint: json.endpoint, keys: json.keys, app: appName, vapid_key_id: keyID }),
  });
  say('Push is on for this browser.');
  emit({ type: 'subscribed', endpoint: json.endpoint });
  return sub;
}

// unsubscribe turns push off in the browser and at the API.
async function unsubscribe() {
  const reg = await registration();
  const sub = await withTimeout(reg.pushManager.getSubscription(), 5000, 'getSubscription');
  if (!sub) { say('Push is already off.'); emit({ type: 'unsubscribed', endpoint: '' }); return; }
  const endpoint = sub.endpoint;
  await sub.unsubscribe();
  await api('/v1/me/push-subscriptions?endpoint=' + encodeURIComponent(endpoint), { method: 'DELETE' });
  say('Push is off for this browser.');
  emit({ type: 'unsubscribed', endpoint });
}

let cursor = '';
async function loadInbox(more) {
  if (!token) return;
  const q = new URLSearchParams({ limit: '20' });
  if (more && cursor) q.set('cursor', cursor);
  const page = await api('/v1/me/notifications?' + q);
  const list = $('inbox');
  if (!more) list.textContent = '';
  for (const item of page.items) {
    const li = document.createElement('li');
    li.className = item.read_at ? '' : 'unread';
    const left = document.createElement('div');
    const title = document.createElement(item.url ? 'a' : 'span');
    title.className = 'title';
    title.textContent = item.title;
    if (item.url) title.href = item.url;
    const when = document.createElement('time');
    when.dateTime = item.published_at;
    when.textContent = new Date(item.published_at).toLocaleString();
    when.className = 'muted';
    left.append(title, document.createElement('br'), when);
    li.append(left);
    if (!item.read_at) {
      const b = document.createElement('button');
      b.textContent = 'Mark read';
      b.onclick = () => api(`/v1/me/notifications/${item.event_id}/read`, { method: 'POST' }).then(() => loadInbox(false)).catch((e) => say(e.message, true));
      li.append(b);
    }
    list.append(li);
  }
  cursor = page.next_cursor || '';
  $('more-wrap').hidden = !cursor;
  return page;
}

// Settings are the student's preferences (GET|PUT /v1/me/preferences).
// The panel edits mutes (push off, the inbox row kept), quiet hours in
// this browser's time zone and the hourly cap; any other rule the student
// has (set elsewhere) is kept as it is.
const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
let prefs = null;
const isMute = (rule) => rule.push === false && rule.inbox === undefined;
const listed = (text) => text.split(',').map((s) => s.trim()).filter(Boolean);

function showSettings(p) {
  prefs = p;
  const mutes = (rules) => Object.keys(rules).filter((k) => isMute(rules[k])).join(', ');
  $('mute-courses').value = mutes(p.courses);
  $('mute-types').value = mutes(p.types);
  $('quiet-start').value = p.quiet_hours ? p.quiet_hours.start : '';
  $('quiet-end').value = p.quiet_hours ? p.quiet_hours.end : '';
  $('cap').value = p.max_pushes_per_hour || '';
  $('zone').textContent = '(' + ((p.quiet_hours && p.quiet_hours.time_zone) || zone) + ')';
}

// withMutes is rules with exactly the listed keys muted.
function withMutes(rules, keys) {
  const out = {};
  for (const [k, rule] of Object.entries(rules)) if (!isMute(rule)) out[k] = rule;
  for (const k of keys) out[k] = Object.assign({}, out[k], { push: false });
  return out;
}

async function saveSettings() {
  // Read the rules this panel does not show, to keep them; the fields keep
  // what the user typed.
  if (!prefs) prefs = await api('/v1/me/preferences');
  const body = { types: withMutes(prefs.types, listed($('mute-types').value)), courses: withMutes(prefs.courses, listed($('mute-courses').value)) };
  const start = $('quiet-start').value, end = $('quiet-end').value;
  if (start || end) body.quiet_hours = { start, end, time_zone: zone };
  if ($('cap').value) body.max_pushes_per_hour = Number($('cap').value);
  showSettings(await api('/v1/me/preferences', { method: 'PUT', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) }));
  say('Settings saved.');
  emit({ type: 'settings', preferences: prefs });
}

// pushState says whether this browser already has a subscription, without
// making one: only the button turns push on. A push service that does not
// answer yet (Firefox's, just after start) is no error worth showing.
async function pushState() {
  let sub = null;
  try {
    const reg = await navigator.serviceWorker.getRegistration('./');
    sub = reg && await withTimeout(reg.pushManager.getSubscription(), 5000, 'getSubscription');
  } catch (e) { /* unknown: offer the button */ }
  say(sub ? 'Push is on for this browser.' : 'Turn on push to be notified on this browser.');
}

function wire() {
  $('token').value = token;
  $('token').onchange = () => { token = $('token').value.trim(); localStorage.setItem('notify.token', token); loadInbox(false).catch((e) => say(e.message, true)); };
  // Subscribing happens here only, on the user's click: a page that
  // subscribed on load would do it for whoever opened any link to it.
  $('subscribe').onclick = () => subscribe().catch((e) => say(e.message, true));
  $('unsubscribe').onclick = () => unsubscribe().catch((e) => say(e.message, true));
  $('refresh').onclick = () => loadInbox(false).catch((e) => say(e.message, true));
  $('more').onclick = () => loadInbox(true).catch((e) => say(e.message, true));
  $('save-settings').onclick = () => saveSettings().catch((e) => say(e.message, true));
  $('settings').ontoggle = () => { if ($('settings').open) api('/v1/me/preferences').then(showSettings).catch((e) => say(e.message, true)); };
  $('zone').textContent = '(' + zone + ')';
  navigator.serviceWorker.addEventListener('message', (ev) => { if (ev.data && ev.data.type === 'push') loadInbox(false).catch(() => {}); });
}

(async function main() {
  wire();
  const ignored = linkedToken ? 'The token in the link was ignored: ' : '';
  if (!token) { say(ignored + 'Enter your access token, then turn on push.'); return; }
  try {
    await loadInbox(false);
    if (ignored) say(ignored + 'this page uses the token you entered.');
    else await pushState();
  } catch (e) {
    say(e.message, true);
  }
})();
