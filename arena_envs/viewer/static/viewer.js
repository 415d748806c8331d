// arena-view: replays recorded episodes (format arena-episode/1) from the states of each tick.
// Plain JavaScript on a canvas: no framework, no build step. Data arrive as scripts calling
// arenaIndex(json) and arenaEpisode(id, json), so a static export works from disk too; each
// passes JSON text that is parsed here, never code. Recordings are shared, so nothing recorded is
// ever put into the page as HTML: text goes in as text nodes (textContent, append, el below).
"use strict";

const BACKGROUND = "rgb(226,221,196)";
const view = { index: [], cache: {}, episode: null, id: null, states: [], tick: 0, zoom: 1, panX: 0, panY: 0,
               playing: null, wanted: null };
const $ = (id) => document.getElementById(id);

// -- data ------------------------------------------------------------------------------------

function arenaIndex(json) {
  const list = JSON.parse(json);
  view.index = list;
  fillSelect($("f-scenario"), list.map((e) => e.scenario));
  fillSelect($("f-error"), list.map((e) => e.error_class));
  renderList();
  const wanted = new URLSearchParams(location.hash.slice(1));
  const id = wanted.has("episode") ? Number(wanted.get("episode")) : (list.length ? list[0].id : null);
  if (id !== null) selectEpisode(id, wanted.has("tick") ? Number(wanted.get("tick")) : 0);
}

// an episode's JSON, or null and why arena-view could not read its line
function arenaEpisode(id, json, why) {
  view.cache[id] = json === null ? new Error(why) : JSON.parse(json);
  if (view.wanted && view.wanted.id === id) show(id, view.wanted.tick);
}

function fillSelect(select, values) {
  for (const value of [...new Set(values)].sort()) {
    const option = document.createElement("option");
    option.value = option.textContent = String(value);
    select.appendChild(option);
  }
}

function selectEpisode(id, tick = 0) {
  if (view.cache[id]) return show(id, tick);
  view.wanted = { id, tick };
  const script = document.createElement("script");
  script.src = `data/episode-${id}.js`;
  script.addEventListener("error", () => arenaEpisode(id, null, `data/episode-${id}.js did not load`));
  document.body.appendChild(script);
}

// Each tick whole: a carried key (world.carried) keeps its last value until a tick changes it.
function wholeStates(episode) {
  const carried = new Set(episode.world.carried || []);
  const states = [];
  let last = {};
  for (const tick of episode.ticks) {
    const state = {};
    for (const key of carried) if (key in last) state[key] = last[key];
    Object.assign(state, tick);
    states.push(state);
    last = state;
  }
  return states;
}

// -- the episode list --------------------------------------------------------------------------

function filtered() {
  const scenario = $("f-scenario").value, seed = $("f-seed").value.trim(), success = $("f-success").value;
  const score = $("f-score").value, error = $("f-error").value;
  return view.index.filter((e) => (!scenario || e.scenario === scenario) && (!seed || String(e.seed) === seed)
    && (!success || String(Boolean(e.success)) === success) && (score === "" || (e.score ?? -Infinity) >= Number(score))
    && (!error || e.error_class === error));
}

function renderList() {
  const rows = filtered();
  $("count").textContent = `${rows.length} of ${view.index.length} episodes`;
  const body = document.querySelector("#episodes tbody");
  body.replaceChildren(...rows.map((e) => {
    const tr = document.createElement("tr");
    tr.dataset.id = e.id;
    if (e.id === view.id) tr.className = "selected";
    const cells = [e.id, e.scenario, e.seed ?? "–", e.agent ?? (e.llm ? "llm" : ""), e.success ? "✓" : "✗",
                   e.score === null || e.score === undefined ? "" : Number(e.score).toFixed(1), e.length,
                   e.error_class === "none" ? "" : e.error_class];
    for (const value of cells) {
      const td = document.createElement("td");
      td.textContent = value;
      tr.appendChild(td);
    }
    tr.addEventListener("click", () => selectEpisode(e.id));
    return tr;
  }));
}

// -- one episode -------------------------------------------------------------------------------

function show(id, tick) {
  stop();
  const episode = view.cache[id];
  view.wanted = null;
  for (const tr of document.querySelectorAll("#episodes tbody tr")) {
    tr.classList.toggle("selected", Number(tr.dataset.id) === id);
  }
  try {
    if (episode instanceof Error) throw episode;
    showEpisode(id, episode, tick);
  } catch (error) {  // a line that is not JSON, or JSON but not a recording the page can draw
    view.id = id;
    view.episode = null;
    $("title").textContent = `#${id} cannot be shown: ${error.message}`;
    $("canvas-box").hidden = $("text-world").hidden = $("transcript-pane").hidden = true;
    for (const part of ["status", "legend", "tick-details"]) $(part).replaceChildren();
  }
}

function showEpisode(id, episode, tick) {
  view.id = id;
  view.episode = episode;
  view.states = wholeStates(episode);
  view.zoom = 1; view.panX = 0; view.panY = 0;
  const scrubber = $("scrubber");
  scrubber.max = view.states.length - 1;
  const s = episode.summary || {};
  $("title").textContent = `#${id} · ${episode.scenario} · seed ${episode.seed ?? "–"}`
    + (episode.agent ? ` · ${episode.agent}` : "") + ` · ${episode.source || ""} · return ${fmt(s.return)}`
    + ` · ${s.success ? "won" : "not won"}` + (s.error ? ` · error: ${s.error}` : "");
  const text = episode.world.kind === "text";
  $("canvas-box").hidden = text;
  $("text-world").hidden = !text;
  renderLegend(episode.world.legend || []);
  renderTranscript(episode.transcript);
  setTick(Math.min(tick, view.states.length - 1), true);
}

function setTick(tick, scroll = false) {
  if (!view.episode) return;
  view.tick = Math.max(0, Math.min(tick, view.states.length - 1));
  $("scrubber").value = view.tick;
  $("tick-label").textContent = `tick ${view.states[view.tick].t} (${view.tick}/${view.states.length - 1})`;
  draw();
  renderDetails();
  highlightTurn(scroll);
  history.replaceState(null, "", `#episode=${view.id}&tick=${view.tick}`);
}

function fmt(value) {
  if (Array.isArray(value)) return "[" + value.map(fmt).join(", ") + "]";
  return typeof value === "number" ? (Number.isInteger(value) ? String(value) : value.toFixed(2)) : String(value ?? "–");
}

// -- drawing the world -------------------------------------------------------------------------

function legendEntry(label) {
  return (view.episode.world.legend || []).find((e) => e.label === label) || { colour: [200, 0, 200] };
}
const rgb = (c) => `rgb(${c[0]},${c[1]},${c[2]})`;
const lighter = (c, amount) => c.map((v) => Math.round(v + (255 - v) * amount));
const spaced = (name) => String(name).replace(/_/g, " ");

function camera() {
  const canvas = $("world"), half = view.episode.world.half_size;
  const scale = canvas.width / (2 * half) * view.zoom;
  return { scale, x: (x) => (x + half) * scale + view.panX, z: (z) => (z + half) * scale + view.panY };
}

function circle(ctx, cam, x, z, r, fill, stroke, width = 1) {
  ctx.beginPath();
  ctx.arc(cam.x(x), cam.z(z), Math.max(r * cam.scale, 1.5), 0, 2 * Math.PI);
  if (fill) { ctx.fillStyle = fill; ctx.fill(); }
  if (stroke) { ctx.strokeStyle = stroke; ctx.lineWidth = width; ctx.stroke(); }
}

function label(ctx, cam, x, z, text, colour = "#222") {
  ctx.fillStyle = colour;
  ctx.font = "11px system-ui, sans-serif";
  ctx.textAlign = "center";
  ctx.fillText(text, cam.x(x), cam.z(z));
}

function draw() {
  if (!view.episode) return;
  const episode = view.episode, state = view.states[view.tick], world = episode.world;
  $("status").textContent = statusLine(state);
  if (world.kind === "text") {
    $("text-world").textContent = state.view || state.obs || "";
    return;
  }
  const canvas = $("world"), ctx = canvas.getContext("2d"), cam = camera();
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.fillStyle = BACKGROUND;
  ctx.fillRect(cam.x(-world.half_size), cam.z(-world.half_size), 2 * world.half_size * cam.scale,
               2 * world.half_size * cam.scale);
  for (const [x, z, r, kind] of state.obstacles || []) {
    circle(ctx, cam, x, z, r, rgb(legendEntry(world.kinds.obstacle[kind]).colour));
  }
  (state.entities || []).forEach(([x, z, kind, alive], i) => {
    const cls = world.entity_classes[i];
    const name = world.kinds[cls][kind];
    const entry = legendEntry(spaced(name));
    if (cls === "hazard") {
      const ring = name === "pit";
      circle(ctx, cam, x, z, world.hazard_radius, ring ? null : rgb(entry.colour), ring ? rgb(entry.colour) : null,
             0.4 * cam.scale);
    } else if (alive && cls === "resource") {
      circle(ctx, cam, x, z, 0.6, rgb(entry.colour));
    } else if (alive && cls === "station") {
      const s = cam.scale;
      ctx.fillStyle = rgb(entry.colour);
      ctx.fillRect(cam.x(x) - s, cam.z(z) - s, 2 * s, 2 * s);
      ctx.fillStyle = rgb(entry.inner || [255, 255, 255]);
      ctx.fillRect(cam.x(x) - 0.45 * s, cam.z(z) - 0.45 * s, 0.9 * s, 0.9 * s);
      label(ctx, cam, x, z + 2.3, spaced(name));
    }
  });
  if (state.craft) drawCraft(ctx, cam, state);
  if (world.points) drawPoints(ctx, cam, world, state);
  drawAgents(ctx, cam, world, state);
  if (state.messages) drawMessages(ctx, cam, world, state);
}

function teamColour(world, agent) {
  const team = world.teams ? world.teams[agent] : 0;
  return legendEntry(world.teams ? `${world.team_names ? world.team_names[team] : ["blue", "red"][team]} agent`
                                 : "agent").colour;
}

function drawAgents(ctx, cam, world, state) {
  const pos = state.pos || [];
  pos.forEach(([x, z], a) => {
    const colour = teamColour(world, a);
    circle(ctx, cam, x, z, world.view_radius, null, rgb(lighter(colour, 0.6)));
    const target = (state.target || [])[a];
    if (target) {
      ctx.beginPath();
      ctx.moveTo(cam.x(x), cam.z(z));
      ctx.lineTo(cam.x(target[0]), cam.z(target[1]));
      ctx.strokeStyle = rgb(colour); ctx.lineWidth = 1; ctx.stroke();
      circle(ctx, cam, target[0], target[1], 0.3, rgb(colour));
    }
    const radius = Math.max(world.agent_radius + 0.2, 5 / cam.scale);
    const alive = !state.alive || state.alive[a];
    circle(ctx, cam, x, z, radius + 1.5 / cam.scale, "#fff");
    circle(ctx, cam, x, z, radius, alive ? rgb(colour) : "rgb(60,60,60)");
    if (pos.length > 1) label(ctx, cam, x, z - radius - 0.6, String(a + 1), rgb(colour));
  });
}

function drawPoints(ctx, cam, world, state) {
  const names = ["neutral", ...(world.team_names || ["blue", "red"])];
  (world.points || []).forEach((point, i) => {
    const [owner, capturer, progress] = (state.points || [])[i] || [-1, -1, 0];
    const ring = legendEntry(`${names[owner + 1]} point`);
    circle(ctx, cam, point.x, point.z, world.capture_radius, rgb(ring.inner || lighter(ring.colour, 0.7)));
    if (capturer >= 0 && progress > 0) {
      const c = legendEntry(`${names[capturer + 1]} agent`).colour;
      const start = -Math.PI / 2, end = start + 2 * Math.PI * progress / world.capture_ticks;
      ctx.beginPath();
      ctx.moveTo(cam.x(point.x), cam.z(point.z));
      ctx.arc(cam.x(point.x), cam.z(point.z), world.capture_radius * cam.scale, start, end);
      ctx.closePath();
      ctx.fillStyle = rgb(lighter(c, 0.3));
      ctx.fill();
    }
    circle(ctx, cam, point.x, point.z, world.capture_radius, null, rgb(ring.colour), Math.max(0.5 * cam.scale, 2));
    label(ctx, cam, point.x, point.z - world.capture_radius - 1.2,
          `${point.name.toUpperCase()}${capturer >= 0 ? ` ${progress}/${world.capture_ticks}` : ""}`);
  });
}

function drawMessages(ctx, cam, world, state) {
  for (const message of state.messages) {
    const [x, z] = state.pos[message.from], colour = teamColour(world, message.from);
    ctx.setLineDash([6, 4]);
    circle(ctx, cam, x, z, world.message_range, null, rgb(colour), 1.5);  // how far a message carries
    ctx.setLineDash([]);
    for (const to of message.reached) {
      ctx.beginPath();
      ctx.moveTo(cam.x(x), cam.z(z));
      ctx.lineTo(cam.x(state.pos[to][0]), cam.z(state.pos[to][1]));
      ctx.strokeStyle = rgb(colour); ctx.lineWidth = 2; ctx.stroke();
    }
    const text = message.token === null ? "✉ (not delivered)" : `✉ ${message.token}`;
    ctx.font = "12px system-ui, sans-serif";
    const width = ctx.measureText(text).width + 10, bx = cam.x(x) + 8, bz = cam.z(z) - 30;
    ctx.fillStyle = "#fff"; ctx.strokeStyle = rgb(colour); ctx.lineWidth = 1.5;
    ctx.beginPath(); ctx.rect(bx, bz, width, 18); ctx.fill(); ctx.stroke();
    ctx.fillStyle = "#222"; ctx.textAlign = "left";
    ctx.fillText(text, bx + 5, bz + 13);
  }
}

function drawCraft(ctx, cam, state) {
  const [recipe, slot, done, total] = state.craft;
  const [x, z] = state.entities[slot];
  circle(ctx, cam, x, z, 1.6, null, "rgb(200,130,0)", 3);
  label(ctx, cam, x, z - 2.2, `${spaced(recipe)} ${done}/${total}`, "rgb(200,130,0)");
}

function statusLine(state) {
  const info = state.info || {}, world = view.episode.world;
  if (world.kind === "text") return `turn ${state.t}${state.cwd ? " · cwd " + state.cwd : ""}`;
  if (state.score && world.points) return `tick ${state.t} · blue ${fmt(state.score[0])} · red ${fmt(state.score[1])}`;
  const health = state.health ? ` · health ${fmt(state.health[0])}` : "";
  const held = state.inventory ? " · holds " + (Object.entries(state.inventory).map(([k, n]) => `${n} ${spaced(k)}`)
    .join(", ") || "nothing") : "";
  return `tick ${state.t} · score ${fmt(info.score ?? 0)}${health}${held}`;
}

function renderLegend(entries) {
  $("legend").replaceChildren(...entries.map((entry) => {
    const span = document.createElement("span"), swatch = document.createElement("canvas");
    swatch.width = swatch.height = 12;
    const ctx = swatch.getContext("2d");
    ctx.fillStyle = ctx.strokeStyle = rgb(entry.colour);
    ctx.lineWidth = 2;
    ctx.beginPath();
    const r = entry.shape === "dot" ? 2.5 : 5;
    if (entry.shape === "square") {
      ctx.fillRect(0, 0, 12, 12);
      ctx.fillStyle = rgb(entry.inner || [255, 255, 255]);
      ctx.fillRect(3, 3, 6, 6);
    } else {
      ctx.arc(6, 6, r, 0, 2 * Math.PI);
      if (entry.shape === "ring") ctx.stroke(); else if (entry.shape === "zone") {
        ctx.fillStyle = rgb(entry.inner || [255, 255, 255]); ctx.fill(); ctx.stroke();
      } else ctx.fill();
    }
    span.append(swatch, entry.char ? `${entry.label}` : entry.label);
    return span;
  }));
}

// -- per tick: calls, results, messages, rewards --------------------------------------------------

function renderDetails() {
  const tick = view.episode.ticks[view.tick], state = view.states[view.tick], world = view.episode.world;
  const parts = [];
  const agents = world.agents || ["agent"];
  if (tick.tool || tick.act !== undefined || tick.r !== undefined) {
    const acts = Array.isArray(tick.act) && world.kind !== "text" ? tick.act : [tick.act];
    const rewards = Array.isArray(tick.r) ? tick.r : [tick.r];
    const rows = (world.kind === "text" ? ["agent"] : agents).map((name, a) => {
      const result = tick.result ? tick.result[a] : (tick.error_code || "");
      const tool = tick.tool ? tick.tool[a] ?? "(carries on)" : (acts[a] && acts[a].tool) || "";
      return el("tr", {}, el("td", {}, name), el("td", {}, tool),
                el("td", {}, el("pre", {}, acts[a] === undefined ? "" : JSON.stringify(acts[a]))),
                el("td", { className: result && result !== "OK" ? "bad" : "" }, result || ""),
                el("td", {}, fmt(rewards[a])));
    });
    const header = el("tr", {}, ...["agent", "tool", "call", "result", "reward"].map((h) => el("th", {}, h)));
    parts.push(el("table", {}, header, ...rows));
  }
  if (tick.output) parts.push(el("div", {}, el("b", {}, "output"), el("pre", {}, tick.output)));
  if (tick.obs) parts.push(el("div", {}, el("b", {}, "observation"), el("pre", {}, tick.obs)));
  for (const m of tick.messages || []) {
    parts.push(el("div", {}, "✉ ", el("b", {}, agents[m.from]), m.token === null ? " sent a message nobody received"
      : ` sent token ${m.token} to ${(m.reached || []).map((r) => agents[r]).join(", ")}`));
  }
  if (state.info) parts.push(el("div", {}, el("b", {}, "info"), " ", el("code", {}, JSON.stringify(state.info))));
  $("tick-details").replaceChildren(...parts);
}

// an element holding ``children``: strings (and anything else but elements) go in as text, never as HTML
function el(tag, properties, ...children) {
  const element = Object.assign(document.createElement(tag), properties);
  element.append(...children.map((child) => (child instanceof Node ? child : String(child))));
  return element;
}

// -- the transcript of an LLM episode -------------------------------------------------------------

function renderTranscript(messages) {
  $("transcript-pane").hidden = !messages;
  if (!messages) return $("transcript").replaceChildren();
  $("transcript").replaceChildren(...messages.map((message, i) => {
    const div = document.createElement("div");
    div.className = `turn ${message.role}`;
    div.dataset.index = i;
    const calls = (message.tool_calls || []).map((c) => `→ ${c.function.name}(${c.function.arguments})`).join("\n");
    const content = message.content === null || message.content === undefined ? ""
      : typeof message.content === "string" ? message.content : JSON.stringify(message.content);
    div.append(el("div", { className: "role" }, `${message.role} ${i}`), (content || "").slice(0, 3000));
    if (calls) div.append(el("div", {}, calls));
    div.addEventListener("click", () => jumpToTurn(i));
    return div;
  }));
}

// the index of the assistant message a transcript message belongs to (its own, or the last before it)
function replyOf(index) {
  const messages = view.episode.transcript;
  for (let i = index; i >= 0; i--) if (messages[i].role === "assistant") return i;
  return null;
}

function jumpToTurn(index) {
  stop();
  const reply = replyOf(index);
  const tick = view.episode.ticks.findIndex((t) => t.turn === reply);
  setTick(tick >= 0 ? tick : 0);
}

function currentTurn() {
  for (let i = view.tick; i >= 0; i--) if (view.episode.ticks[i].turn !== undefined) return view.episode.ticks[i].turn;
  return null;
}

function highlightTurn(scroll) {
  if (!view.episode.transcript) return;
  const turn = currentTurn();
  for (const div of document.querySelectorAll(".turn")) {
    const current = Number(div.dataset.index) === turn;
    div.classList.toggle("current", current);
    if (current && scroll) div.scrollIntoView({ block: "nearest" });
  }
}

// -- controls --------------------------------------------------------------------------------

function stop() {
  if (view.playing) clearInterval(view.playing);
  view.playing = null;
  $("play").textContent = "play";
}

function play() {
  if (view.playing || !view.episode) return stop();
  if (view.tick >= view.states.length - 1) setTick(0);
  const fps = (view.episode.world.kind === "text" ? 2 : 10) * Number($("speed").value);
  view.playing = setInterval(() => {
    if (view.tick >= view.states.length - 1) return stop();
    setTick(view.tick + 1, true);
  }, 1000 / fps);
  $("play").textContent = "pause";
}

function zoomAt(factor, px, py) {
  const zoom = Math.min(Math.max(view.zoom * factor, 0.5), 20);
  view.panX = px - (px - view.panX) * zoom / view.zoom;
  view.panY = py - (py - view.panY) * zoom / view.zoom;
  view.zoom = zoom;
  draw();
}

function setUp() {
  $("play").addEventListener("click", play);
  $("speed").addEventListener("change", () => { if (view.playing) { stop(); play(); } });
  $("scrubber").addEventListener("input", (e) => { stop(); setTick(Number(e.target.value)); });
  for (const id of ["f-scenario", "f-seed", "f-success", "f-score", "f-error"]) {
    for (const event of ["input", "change"]) $(id).addEventListener(event, renderList);
  }
  const canvas = $("world");
  const centre = () => [canvas.width / 2, canvas.height / 2];
  $("zoom-in").addEventListener("click", () => zoomAt(1.5, ...centre()));
  $("zoom-out").addEventListener("click", () => zoomAt(1 / 1.5, ...centre()));
  $("zoom-fit").addEventListener("click", () => { view.zoom = 1; view.panX = view.panY = 0; draw(); });
  canvas.addEventListener("wheel", (e) => { e.preventDefault(); zoomAt(e.deltaY < 0 ? 1.2 : 1 / 1.2, e.offsetX, e.offsetY); });
  let drag = null;
  canvas.addEventListener("mousedown", (e) => { drag = [e.offsetX - view.panX, e.offsetY - view.panY]; });
  window.addEventListener("mouseup", () => { drag = null; });
  canvas.addEventListener("mousemove", (e) => {
    if (drag) { view.panX = e.offsetX - drag[0]; view.panY = e.offsetY - drag[1]; draw(); }
  });
  document.addEventListener("keydown", (e) => {
    if (e.target.tagName === "INPUT" || !view.episode) return;
    if (e.key === " ") { e.preventDefault(); play(); }
    if (e.key === "ArrowRight") setTick(view.tick + 1);
    if (e.key === "ArrowLeft") setTick(view.tick - 1);
  });
}

// what tests (and the curious) can ask the page: where each agent is drawn now, in canvas pixels
window.arenaView = {
  view,
  selectEpisode,
  setTick,
  agentPixels: () => (view.states[view.tick].pos || []).map(([x, z]) => {
    const cam = camera();
    return [Math.round(cam.x(x)), Math.round(cam.z(z))];
  }),
};
setUp();
