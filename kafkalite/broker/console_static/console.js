// The kafkalite console: read-only pages over the broker's /console/api JSON.
// Pages are chosen by the URL's hash (#/, #/topics, #/topics/NAME, #/groups, #/groups/ID,
// #/messages?topic=&partition=&offset=); the overview and group pages refresh every 2 s and chart
// what they saw since the page opened.
"use strict";

const REFRESH_MS = 2000;
const CHART_POINTS = 90;
const COLORS = ["#1766c2", "#e07b00", "#2e9d57", "#b23c9a", "#6b6b6b"];
let timer = null;
let history = [];

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function table(id, headers, rows) {
  return el("table", {id: id},
    el("thead", {}, el("tr", {}, headers.map((header) =>
      el("th", {class: header.startsWith("#") ? "num" : undefined}, header.replace(/^#/, ""))))),
    el("tbody", {}, rows.map((row) => el("tr", {}, row.map((cell, index) =>
      el("td", {class: headers[index].startsWith("#") ? "num" : undefined}, cell))))));
}

function card(label, value, id) {
  return el("div", {class: "card"}, el("div", {class: "value", id: id}, value), el("div", {class: "label"}, label));
}

function number(value) {
  return value === null || value === undefined ? "-" : Number(value).toLocaleString("en-US");
}

function bytes(value) {
  if (value === null || value === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let scaled = Number(value);
  let unit = 0;
  while (scaled >= 1024 && unit < units.length - 1) { scaled /= 1024; unit += 1; }
  return `${scaled.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

async function api(path) {
  const response = await fetch(`/console/api/${path}`, {headers: {Accept: "application/json"}});
  const body = await response.json();
  if (!response.ok) throw new Error(body.message || body.error || `HTTP ${response.status}`);
  return body;
}

// A line chart of series [{name, points: [[t, value]]}] drawn as SVG.
function chart(id, series, unit) {
  const width = 760, height = 200, left = 56, bottom = 22, top = 10;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("id", id);
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  const all = series.flatMap((item) => item.points);
  const maximum = Math.max(1, ...all.map((point) => point[1]));
  const first = Math.min(...all.map((point) => point[0]), Date.now());
  const last = Math.max(...all.map((point) => point[0]), first + 1);
  const x = (t) => left + (width - left - 8) * (t - first) / (last - first);
  const y = (v) => top + (height - top - bottom) * (1 - v / maximum);
  const line = (x1, y1, x2, y2, color) => {
    const node = document.createElementNS(svg.namespaceURI, "line");
    Object.entries({x1, y1, x2, y2, stroke: color}).forEach(([key, value]) => node.setAttribute(key, value));
    svg.append(node);
  };
  const text = (content, tx, ty) => {
    const node = document.createElementNS(svg.namespaceURI, "text");
    node.setAttribute("x", tx);
    node.setAttribute("y", ty);
    node.textContent = content;
    svg.append(node);
  };
  line(left, y(0), width - 8, y(0), "#c8d0d9");
  line(left, y(maximum), width - 8, y(maximum), "#eef1f4");
  text(`${number(Math.round(maximum))}${unit}`, 2, y(maximum) + 4);
  text(`0${unit}`, 2, y(0) + 4);
  series.forEach((item, index) => {
    if (!item.points.length) return;
    const path = document.createElementNS(svg.namespaceURI, "polyline");
    path.setAttribute("fill", "none");
    path.setAttribute("stroke", COLORS[index % COLORS.length]);
    path.setAttribute("stroke-width", "2");
    path.setAttribute("points", item.points.map((point) => `${x(point[0]).toFixed(1)},${y(point[1]).toFixed(1)}`).join(" "));
    svg.append(path);
  });
  const legend = el("div", {class: "legend"}, series.map((item, index) =>
    el("span", {}, el("i", {style: `background:${COLORS[index % COLORS.length]}`}), item.name)));
  return el("div", {}, svg, legend);
}

// --- pages ---------------------------------------------------------------------------------------

async function overview() {
  const [cluster, totals] = await Promise.all([api("cluster"), api("throughput")]);
  history.push({t: Date.now(), totals});
  history = history.slice(-CHART_POINTS);
  const rates = {messages_in: [], bytes_in: [], bytes_out: []};
  for (let index = 1; index < history.length; index += 1) {
    const before = history[index - 1], now = history[index];
    const seconds = Math.max((now.t - before.t) / 1000, 0.001);
    for (const key of Object.keys(rates)) {
      rates[key].push([now.t, Math.max(0, (now.totals[key] - before.totals[key]) / seconds)]);
    }
  }
  const alerts = [];
  if (cluster.offline_partitions) alerts.push(`${cluster.offline_partitions} offline partition(s): no leader`);
  if (cluster.under_replicated_partitions) {
    alerts.push(`${cluster.under_replicated_partitions} under-replicated partition(s): ISR smaller than the replicas`);
  }
  if (cluster.zookeeper_state !== "CONNECTED") alerts.push(`ZooKeeper session of broker ${cluster.served_by}: ${cluster.zookeeper_state}`);
  return [
    el("div", {class: "cards"},
      card("brokers", cluster.brokers.length, "broker-count"),
      card("controller", cluster.controller_id, "controller-id"),
      card("topics", cluster.topics, "topic-count"),
      card("partitions", cluster.partitions, "partition-count"),
      card("ZooKeeper session", cluster.zookeeper_state, "zookeeper-state")),
    alerts.length ? el("div", {class: "alert", id: "alerts"}, alerts.join("; "))
      : el("div", {class: "ok", id: "alerts"}, "No offline or under-replicated partitions"),
    el("h2", {}, "Brokers"),
    table("brokers-table", ["Id", "Address", "Rack", "Role"], cluster.brokers.map((broker) => [
      broker.id, `${broker.host}:${broker.port}`, broker.rack || "-",
      broker.id === cluster.controller_id ? el("span", {class: "badge"}, "controller") : ""])),
    el("h2", {}, "Messages in per second (all topics but the internal ones)"),
    chart("messages-chart", [{name: "messages in/s", points: rates.messages_in}], ""),
    el("h2", {}, "Bytes per second"),
    chart("bytes-chart", [{name: "in", points: rates.bytes_in}, {name: "out (consumers)", points: rates.bytes_out}], " B"),
  ];
}

async function topics() {
  const answer = await api("topics");
  return [table("topics-table", ["Topic", "#Partitions", "#Replication", "#Under-replicated", "#Offline"],
    answer.topics.map((topic) => [
      el("a", {href: `#/topics/${encodeURIComponent(topic.name)}`}, topic.name),
      topic.partitions, topic.replication_factor, topic.under_replicated, topic.offline]))];
}

async function topic(name) {
  const answer = await api(`topics/${encodeURIComponent(name)}`);
  return [
    el("p", {}, el("a", {href: `#/messages?topic=${encodeURIComponent(name)}&partition=0&offset=0`}, "Browse messages")),
    el("h2", {}, "Partitions"),
    table("partitions-table", ["#Partition", "#Leader", "Replicas", "ISR", "#Start offset", "#End offset", "#Messages",
      "#Size"], answer.partitions.map((partition) => [
      partition.partition, partition.leader, partition.replicas.join(", "), partition.isr.join(", "),
      number(partition.log_start_offset), number(partition.log_end_offset),
      partition.log_end_offset === null || partition.log_start_offset === null ? "-"
        : number(partition.log_end_offset - partition.log_start_offset),
      bytes(partition.size_bytes)])),
    el("h2", {}, "Configs"),
    table("configs-table", ["Name", "Value", "Source"], answer.configs.map((entry) =>
      [entry.name, entry.value === null ? "-" : entry.value, entry.is_default ? "default" : "topic"])),
  ];
}

async function groups() {
  const answer = await api("groups");
  return [answer.groups.length
    ? table("groups-table", ["Group", "State", "Protocol type", "#Coordinator"], answer.groups.map((group) => [
      el("a", {href: `#/groups/${encodeURIComponent(group.group_id)}`}, group.group_id),
      group.state, group.protocol_type, group.coordinator]))
    : el("p", {id: "groups-table"}, "No consumer groups yet.")];
}

async function group(groupId) {
  const answer = await api(`groups/${encodeURIComponent(groupId)}`);
  const total = answer.offsets.reduce((sum, item) => sum + (item.lag || 0), 0);
  history.push({t: Date.now(), total});
  history = history.slice(-CHART_POINTS);
  return [
    el("div", {class: "cards"},
      card("state", answer.state, "group-state"),
      card("members", answer.members.length, "member-count"),
      card("total lag", number(total), "lag-total"),
      card("coordinator", answer.coordinator)),
    el("h2", {}, "Lag"),
    chart("lag-chart", [{name: "total lag (records)", points: history.map((item) => [item.t, item.total])}], ""),
    el("h2", {}, "Partitions"),
    table("offsets-table", ["Topic", "#Partition", "#Committed", "#Log end", "#Lag"], answer.offsets.map((item) => [
      item.topic, item.partition, number(item.committed_offset), number(item.log_end_offset), number(item.lag)])),
    el("h2", {}, "Members"),
    table("members-table", ["Member", "Client", "Host", "Assignment"], answer.members.map((member) => [
      member.member_id, member.client_id, member.client_host,
      member.assignment === null ? "(not Kafka's consumer protocol)"
        : member.assignment.map((item) => `${item.topic}: ${item.partitions.join(", ")}`).join("; ")])),
  ];
}

function render(data, format) {
  if (data === null || data === undefined) return "null";
  if (format === "hex") {
    return Array.from(new TextEncoder().encode(data), (byte) => byte.toString(16).padStart(2, "0")).join(" ");
  }
  if (format === "json") {
    try { return JSON.stringify(JSON.parse(data), null, 2); } catch (error) { return data; }
  }
  return data;
}

function payload(record, name, format) {
  if (record[`${name}_b64`] !== undefined) {
    const raw = atob(record[`${name}_b64`]);
    return format === "hex" ? Array.from(raw, (c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join(" ")
      : `base64:${record[`${name}_b64`]}`;
  }
  return render(record[name], format);
}

async function messages(params) {
  const topicList = (await api("topics")).topics.map((item) => item.name);
  const chosen = params.get("topic") || topicList.find((name) => !name.startsWith("__")) || "";
  const format = params.get("format") || "text";
  const form = el("form", {id: "messages-form"},
    el("label", {}, "Topic", el("select", {name: "topic"}, topicList.map((name) =>
      el("option", name === chosen ? {value: name, selected: "selected"} : {value: name}, name)))),
    el("label", {}, "Partition", el("input", {name: "partition", type: "number", min: "0", value: params.get("partition") || "0"})),
    el("label", {}, "From offset", el("input", {name: "offset", type: "number", min: "0", value: params.get("offset") || "0"})),
    el("label", {}, "or from time", el("input", {name: "time", type: "datetime-local", value: params.get("time") || ""})),
    el("label", {}, "Show as", el("select", {name: "format"}, ["text", "json", "hex"].map((name) =>
      el("option", name === format ? {value: name, selected: "selected"} : {value: name}, name)))),
    el("button", {type: "submit"}, "Show"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = new URLSearchParams(new FormData(form));
    if (!values.get("time")) values.delete("time");
    window.location.hash = `#/messages?${values.toString()}`;
  });
  if (!chosen) return [form, el("p", {}, "No topics yet.")];
  const query = new URLSearchParams({topic: chosen, partition: params.get("partition") || "0", limit: "100"});
  if (params.get("time")) query.set("timestamp", String(new Date(params.get("time")).getTime()));
  else query.set("offset", params.get("offset") || "0");
  const answer = await api(`messages?${query.toString()}`);
  return [form,
    el("p", {class: "muted"}, `High watermark ${number(answer.high_watermark)}, log start ${number(answer.log_start_offset)}`),
    table("messages-table", ["#Offset", "Time", "Key", "Value", "Headers"], answer.records.map((record) => [
      record.offset, new Date(record.timestamp).toISOString(), el("pre", {}, payload(record, "key", format)),
      el("pre", {}, payload(record, "value", format)),
      (record.headers || []).map(([key, value]) => `${key}=${value ?? ""}`).join(", ")]))];
}

// --- routing -------------------------------------------------------------------------------------

function route() {
  const hash = window.location.hash.replace(/^#/, "") || "/";
  const [path, search] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(search || "");
  if (parts[0] === "topics" && parts[1]) return {page: "topics", title: `Topic ${parts[1]}`, draw: () => topic(parts[1])};
  if (parts[0] === "topics") return {page: "topics", title: "Topics", draw: topics};
  if (parts[0] === "groups" && parts[1]) {
    return {page: "groups", title: `Consumer group ${parts[1]}`, draw: () => group(parts[1]), refresh: true};
  }
  if (parts[0] === "groups") return {page: "groups", title: "Consumer groups", draw: groups};
  if (parts[0] === "messages") return {page: "messages", title: "Messages", draw: () => messages(params)};
  return {page: "overview", title: "Cluster overview", draw: overview, refresh: true};
}

async function show(current) {
  const errorBox = document.getElementById("error");
  try {
    const nodes = await current.draw();
    if (current !== active) return;  // the user moved on meanwhile
    document.getElementById("content").replaceChildren(...nodes);
    errorBox.hidden = true;
  } catch (error) {
    if (current !== active) return;
    errorBox.textContent = `Could not load this page: ${error.message}`;
    errorBox.hidden = false;
  }
  if (current.refresh && current === active) timer = setTimeout(() => show(current), REFRESH_MS);
}

let active = null;

function navigate() {
  if (timer !== null) clearTimeout(timer);
  history = [];
  active = route();
  document.getElementById("page-title").textContent = active.title;
  document.title = `${active.title} · kafkalite`;
  for (const link of document.querySelectorAll("header nav a")) {
    link.classList.toggle("active", link.dataset.page === active.page);
  }
  show(active);
}

window.addEventListener("hashchange", navigate);
api("cluster").then((cluster) => {
  document.getElementById("served-by").textContent = `cluster ${cluster.cluster_id} · served by broker ${cluster.served_by}`;
}).catch(() => {});
navigate();
