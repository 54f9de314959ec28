// ui.js: the status page (gateway/routes/ui.h).  Takes the token from the sign-in
// form or from #token=... in the address (the fragment never reaches the
// server), keeps it in sessionStorage and clears it from the address bar,
// then polls GET /v1/status every 2 s and redraws the tables.  Every value
// is inserted as text (textContent), never as HTML.
'use strict';

(function () {
  const KEY = 'tether.token';
  const POLL_MS = 2000;
  let timer = null;
  let renders = 0;

  const $ = (id) => document.getElementById(id);

  function takeTokenFromFragment() {
    const h = window.location.hash;
    if (!h.startsWith('#token=')) return;
    const t = decodeURIComponent(h.slice('#token='.length)).trim();
    if (t !== '') sessionStorage.setItem(KEY, t);
    history.replaceState(null, '', window.location.pathname + window.location.search);
  }

  function showSignin(message) {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    $('status').hidden = true;
    $('signout').hidden = true;
    $('who').textContent = '';
    $('signin').hidden = false;
    $('signin-error').textContent = message || '';
    document.body.dataset.view = 'signin';
  }

  function schedule() {
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(poll, POLL_MS);
  }

  function bytes(n) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? String(n) : n.toFixed(1)) + ' ' + units[i];
  }

  function age(seconds) {
    if (seconds < 60) return seconds + ' s';
    if (seconds < 3600) return Math.floor(seconds / 60) + ' min ' + (seconds % 60) + ' s';
    const h = Math.floor(seconds / 3600);
    return h + ' h ' + Math.floor((seconds % 3600) / 60) + ' min';
  }

  function when(iso) {
    if (!iso) return '';
    const d = new Date(iso);
    return isNaN(d) ? iso : d.toLocaleString();
  }

  // cell(label, text, className): one <td>, text only.
  function cell(label, text, className) {
    const td = document.createElement('td');
    td.dataset.label = label;
    if (className) td.className = className;
    td.textContent = text;
    return td;
  }

  function fill(tableId, rows, emptyText, columns) {
    const body = $(tableId).tBodies[0];
    const fresh = document.createElement('tbody');
    if (rows.length === 0) {
      const tr = document.createElement('tr');
      const td = cell('', emptyText, 'empty');
      td.colSpan = columns;
      tr.appendChild(td);
      fresh.appendChild(tr);
    }
    rows.forEach((tr) => fresh.appendChild(tr));
    body.replaceWith(fresh);
  }

  function clusterName(view, id) {
    const c = view.clusters.find((x) => x.id === id);
    return c ? c.name : id;
  }

  function render(view) {
    const clusters = view.clusters.map((c) => {
      const tr = document.createElement('tr');
      tr.dataset.clusterId = c.id;
      tr.append(cell('Name', c.name), cell('ID', c.id, 'id'),
        cell('Agents', String(c.agents), 'num'),
        cell('Connected', String(c.agents_connected), 'num'));
      return tr;
    });
    const agents = view.agents.map((a) => {
      const tr = document.createElement('tr');
      tr.dataset.agentId = a.id;
      tr.dataset.state = a.state;
      tr.dataset.connected = a.connected ? 'yes' : 'no';
      const state = cell('State', '');
      const badge = document.createElement('span');
      badge.className = 'badge state-' + a.state;
      badge.textContent = a.state;
      state.appendChild(badge);
      tr.append(cell('Node', a.node),
        cell('Cluster', clusterName(view, a.cluster)), state,
        cell('Connected since', a.connected ? when(a.connected_since) : 'not connected',
          a.connected ? '' : 'offline'),
        cell('Last seen', a.last_seen ? when(a.last_seen) : 'never'),
        cell('Version', a.version || 'unknown'),
        cell('Last error', a.last_error || ''), cell('Agent', a.id, 'id'));
      return tr;
    });
    const streams = view.streams.map((s) => {
      const tr = document.createElement('tr');
      tr.append(cell('Kind', s.kind), cell('Who', s.who),
        cell('Cluster', clusterName(view, s.cluster)), cell('Node', s.node),
        cell('Target', s.target, 'mono'), cell('Up', bytes(s.bytes_up), 'num'),
        cell('Down', bytes(s.bytes_down), 'num'), cell('Age', age(s.age_seconds), 'num'));
      return tr;
    });
    fill('clusters', clusters, 'No clusters.', 4);
    fill('agents', agents, 'No agents.', 8);
    fill('streams', streams, 'No live streams.', 8);
    $('who').textContent = 'signed in as ' + view.principal;
    $('updated').textContent = 'Updated ' + when(view.time) + ' (every 2 s)';
    document.body.classList.remove('stale');
    $('signin').hidden = true;
    $('status').hidden = false;
    $('signout').hidden = false;
    renders++;
    document.body.dataset.view = 'status';
    document.body.dataset.renders = String(renders);
  }

  function stale(message) {
    document.body.classList.add('stale');
    $('updated').textContent = message + '; retrying every 2 s';
  }

  async function poll() {
    const token = sessionStorage.getItem(KEY);
    if (!token) {
      showSignin('');
      return;
    }
    let res;
    try {
      res = await fetch('/v1/status', {
        headers: { Authorization: 'Bearer ' + token },
        cache: 'no-store', credentials: 'omit',
      });
    } catch (e) {
      stale('The gateway cannot be reached');
      schedule();
      return;
    }
    if (res.status === 401 || res.status === 403) {
      const body = await res.json().catch(() => ({}));
      sessionStorage.removeItem(KEY);
      showSignin('Token refused: ' + (body.error || res.status));
      return;
    }
    if (!res.ok) {
      stale('The gateway answered HTTP ' + res.status);
      schedule();
      return;
    }
    try {
      render(await res.json());
    } catch (e) {
      stale('Unreadable answer');
    }
    schedule();
  }

  function start() {
    takeTokenFromFragment();
    $('signin-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const t = $('token').value.trim();
      $('token').value = '';
      if (t === '') return;
      sessionStorage.setItem(KEY, t);
      poll();
    });
    $('signout').addEventListener('click', () => {
      sessionStorage.removeItem(KEY);
      showSignin('Signed out.');
    });
    poll();
  }

  start();
})();
