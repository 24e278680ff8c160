// The live page: renders the snapshot inside the page (#initial-state) at once, so its first
// paint is the fleet, then each snapshot the server pushes on /_emulator/page/stream.
// Plain DOM (no framework, no build step). Every name from the server goes in as text, never
// as HTML: TargetModel values are user input.
"use strict";

let state = null;
let selected = null; // {endpoint, variant, instance, model} of the detail view

const ACTIVITY_LABELS = {
  deployment: "deployment", rollback: "rolling back", "rolled-back": "rolled back",
  "rollback-failed": "rollback failed", deployed: "deployed", scaling: "scaling",
  fault: "fault injected",
};

const STATE_LABELS = {
  new: "new", downloading: "downloading", on_disk: "on disk", loading: "loading",
  loaded: "loaded", pinned: "pinned", unloading: "unloading",
};

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    else if (key === "onclick") node.addEventListener("click", value);
    else if (key.startsWith("data-") || key === "title" || key === "style") node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function bytes(n) {
  if (n === null || n === undefined) return "∞";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i && n < 10 ? 1 : 0)} ${units[i]}`;
}

function clock(epoch) {
  return new Date(epoch * 1000).toLocaleTimeString([], { hour12: false });
}

function ago(epoch) {
  if (!epoch) return "never";
  const s = Math.max(0, state.Time - epoch);
  return s < 60 ? `${s.toFixed(0)} s ago` : `${(s / 60).toFixed(0)} min ago`;
}

// Bakes and waits run on the emulated clock (--clock-scale): say so, with the real time.
function emulated(seconds) {
  const scale = state.ClockScale || 1;
  const real = seconds / scale;
  return scale === 1 ? `${Math.ceil(seconds)} s (emulated clock, at real speed)`
    : `${Math.ceil(seconds)} s emulated (${real < 10 ? real.toFixed(1) : Math.ceil(real)} s real at --clock-scale ${scale})`;
}

function micros(us) { return us >= 1e6 ? `${(us / 1e6).toFixed(2)} s` : `${(us / 1e3).toFixed(1)} ms`; }

function displayState(model) {
  return model.State === "loaded" && model.Pinned ? "pinned" : model.State;
}

// The last lifecycle event of a model on an instance (events are newest first).
function lastEvent(endpoint, variant, instance, target, step) {
  return state.Events.find(e => e.endpoint === endpoint && e.variant === variant
    && e.instance === instance && e.model === target && (!step || e.step === step));
}

function meter(label, used, capacity, unit) {
  const fraction = capacity ? Math.min(used / capacity, 1) : 0;
  const text = unit === "bytes" ? `${bytes(used)} / ${bytes(capacity)}`
    : `${used} / ${capacity ?? "∞"}`;
  return el("div", { class: "meter", title: `${label}: ${text}` },
    el("span", { class: "meter-label" }, label),
    el("span", { class: "meter-track" },
      el("span", { class: `meter-fill${fraction > 0.9 ? " full" : ""}`, style: `width:${(fraction * 100).toFixed(1)}%` })),
    el("span", { class: "meter-text" }, text));
}

// An asynchronous endpoint's queue (InvokeEndpointAsync): its backlog, what waits, what is in
// flight (at most MaxConcurrentInvocationsPerInstance per instance in service), the oldest
// request's age on the emulated clock.
function asyncQueue(queue, figure) {
  if (!queue) return null;
  const capacity = queue.MaxConcurrentInvocationsPerInstance * queue.InstancesInService;
  return el("div", { class: "figures async-queue", "data-async-queue": "true",
    title: `asynchronous queue: at most ${queue.MaxConcurrentInvocationsPerInstance} in flight per instance, ${queue.InstancesInService} in service` },
    figure("async backlog", queue.Backlog, "async-backlog"),
    figure("waiting", queue.Waiting, "async-waiting"),
    figure(`in flight (of ${capacity})`, queue.InFlight, "async-in-flight"),
    figure("oldest request", queue.Backlog ? `${queue.OldestRequestAgeSeconds.toFixed(1)} s` : "–", "async-oldest"));
}

function renderSummary() {
  const cards = Object.entries(state.Endpoints).map(([name, ep]) => {
    const m = ep.Metrics.Metrics;
    const hits = m.ModelCacheHit;
    const ratio = hits.SampleCount ? (hits.Sum / hits.SampleCount * 100).toFixed(1) + " %" : "–";
    const components = Object.values(ep.InferenceComponents || {});
    // Every failed call the error list was told of, on either fleet of a deployment.
    const errors = ep.ErrorCount ?? (m.Invocation4XXErrors.Sum + m.Invocation5XXErrors.Sum
      + components.reduce((n, c) => n + c.Errors, 0));
    const last = (state.Activity || []).find(a => a.endpoint === name && a.kind !== "scaling" && a.kind !== "fault");
    const inFlight = Object.values(ep.Variants).flatMap(v => v.Instances)
      .reduce((n, i) => n + i.InFlight, 0);
    const figure = (label, value, id) => el("div", { class: "figure" },
      el("span", { class: "value", "data-figure": id }, value), el("span", { class: "label" }, label));
    return el("article", { class: "card", "data-endpoint": name },
      el("h3", {}, name, el("small", {}, ep.InferenceComponents ? " inference components"
        : ep.MultiModel ? " multi-model" : " single model")),
      el("div", { class: "figures" },
        figure("invocations", m.Invocations.Sum + components.reduce((n, c) => n + c.Invocations, 0), "invocations"),
        figure("cache hit ratio", ratio, "hit-ratio"),
        figure("loaded models", m.LoadedModelCount.Current, "loaded"),
        figure("in flight", inFlight, "in-flight"),
        figure("errors", errors, "errors"),
        figure("model latency (avg)", m.ModelLatency.SampleCount ? micros(m.ModelLatency.Average) : "–", "latency"),
        figure("load wait (avg)", m.ModelLoadingWaitTime.SampleCount ? micros(m.ModelLoadingWaitTime.Average) : "–", "wait")),
      asyncQueue(ep.AsyncQueue, figure),
      last ? el("p", { class: `last-deployment kind-${last.kind}`, "data-kind": last.kind },
        el("span", { class: `badge activity-${last.kind}` }, ACTIVITY_LABELS[last.kind] || last.kind),
        ` ${clock(last.time)} · ${last.text}`) : null);
  });
  document.getElementById("summary").replaceChildren(
    ...(cards.length ? cards : [el("p", { class: "empty" }, "No endpoint yet. Start one with mme serve --model-data …, or CreateEndpoint.")]));
}

function modelRow(endpoint, variant, instance, model) {
  const shown = displayState(model);
  const eviction = lastEvent(endpoint, variant, instance.InstanceId, model.TargetModel, "unloading");
  const evictedFor = model.State !== "loaded" && eviction && eviction.evicted ? eviction.details.for : null;
  const budget = instance.MemoryBudgetBytes;
  // The budget counts what the model's processes hold (measured) once it has loaded.
  const counted = model.MemoryBytes ?? model.SizeBytes;
  const share = budget ? Math.min(counted / budget, 1) : null;
  const isSelected = selected && selected.model === model.TargetModel && selected.instance === instance.InstanceId
    && selected.endpoint === endpoint && selected.variant === variant;
  return el("tr", {
      class: `model${isSelected ? " selected" : ""}`, "data-model": model.TargetModel,
      "data-endpoint": endpoint, "data-instance": `${variant}/${instance.InstanceId}`,
      "data-state": shown, "data-evicted-for": evictedFor,
      onclick: () => { selected = { endpoint, variant, instance: instance.InstanceId, model: model.TargetModel }; render(); },
    },
    el("td", { class: "lru" }, model.LruPosition ?? "–"),
    el("td", { class: "name" }, model.TargetModel || "(the endpoint's model)",
      model.ContainerName ? el("span", { class: "muted" }, ` in ${model.ContainerName}`) : null),
    el("td", {}, el("span", { class: `badge state-${shown}` }, STATE_LABELS[shown] || shown),
      evictedFor ? el("span", { class: "note" }, ` evicted for ${evictedFor}`) : null,
      model.KindGpuOnCpu ? el("span", { class: "note", "data-gpu-on-cpu": "true", title: "Its KIND_GPU instance groups run on CPU: the endpoint's instance type has GPUs, this machine has none." }, " KIND_GPU on CPU") : null,
      model.StoreChanged ? el("span", { class: "note", title: "The object in the model store was overwritten. As on SageMaker, the copy loaded before is served until it is evicted from memory and deleted from disk; upload new bytes under a new name to serve them at once." }, " store changed: serving the copy loaded before") : null),
    el("td", { class: "num", title: "extracted files" }, bytes(model.SizeBytes)),
    el("td", { class: "num", title: "what its serving processes held after its last load" },
      model.MeasuredBytes == null ? el("span", { class: "muted" }, "–") : bytes(model.MeasuredBytes)),
    el("td", {}, share === null ? el("span", { class: "muted" }, "no memory budget")
      : el("span", { class: "meter-track small", title: `${(share * 100).toFixed(1)} % of the memory budget` },
        el("span", { class: "meter-fill", style: `width:${(share * 100).toFixed(1)}%` }))),
    el("td", { class: "num" }, model.InFlight),
    el("td", {}, model.OnDisk ? "yes" : "no"),
    el("td", {}, ago(model.LastUsed)));
}

// A guarded deployment in progress: which fleet takes what share, the step, the bake, the alarms.
function deploymentBlock(name, d) {
  if (!d) return null;
  const green = Math.round(d.GreenShare * 100);
  const left = d.BakeSecondsLeft == null ? "–" : `${Math.ceil(d.BakeSecondsLeft)} s`;
  const scale = state.ClockScale || 1;
  const real = d.BakeSecondsLeft == null ? "" : ` emulated (${(d.BakeSecondsLeft / scale).toFixed(scale === 1 ? 0 : 1)} s real)`;
  const phase = { starting: "new fleet starting", baking: `baking step ${d.Step} of ${d.Steps}`,
    terminating: "new fleet serves; old fleet waits to stop", rolling_back: "rolling back" }[d.Phase] || d.Phase;
  const kind = d.Kind === "RollingUpdatePolicy" ? "rolling" : "blue/green";
  const alarms = Object.entries(d.Alarms);
  const instances = d.Green ? Object.entries(d.Green.Variants).flatMap(([vname, v]) => v.Instances.map(i =>
    el("span", { class: "badge generation-green", title: i.TritonUrl || "", "data-instance": `${vname}/${i.InstanceId}` },
      `${vname}/${i.InstanceId} · ${i.InFlight} in flight · ${(i.Models || []).filter(m => m.State === "loaded").length} loaded`))) : [];
  return el("div", { class: "deployment", "data-deployment": name, "data-phase": d.Phase },
    el("h4", {}, `deployment to ${d.NewConfig}`, el("small", {},
      ` ${kind} · ${d.Routing.toLowerCase().replace(/_/g, " ")} · ${phase}${d.Resumed ? " · resumed after a restart" : ""}`)),
    el("div", { class: "split", "data-green-share": green, title: `blue (running config) ${100 - green} % · green (new config) ${green} %` },
      el("span", { class: "split-blue", style: `width:${100 - green}%` }, `blue ${100 - green} %`),
      el("span", { class: "split-green", style: `width:${green}%` }, green ? `green ${green} %` : "")),
    el("p", { class: "bake" }, `bake ${emulated(d.BakeSeconds)} per step · left: `,
      el("strong", { "data-figure": "bake-left" }, left), real,
      d.TerminationWaitSeconds ? ` · then ${emulated(d.TerminationWaitSeconds)} before the old fleet stops` : ""),
    el("p", {}, "rollback alarms: ", ...(alarms.length ? alarms.map(([alarm, s]) =>
      el("span", { class: `badge alarm-${(s || "missing").toLowerCase()}`, "data-alarm": alarm }, `${alarm} ${s || "missing"}`))
      : [el("span", { class: "muted" }, "none")])),
    el("p", {}, `green fleet: ${d.NewConfigInstances} instance(s) serving `, ...instances));
}

// An endpoint for inference components: component -> copies -> instances, with each copy's
// state and normalized utilization (namespace /aws/sagemaker/InferenceComponents).
function percent(value) { return value === undefined || value === null ? "–" : `${value.toFixed(1)} %`; }

// Open stateful sessions of a variant or a component: each with the instance (or copy) that
// holds it and its expiry (docs/sessions-and-routing.md).
function sessionsLine(sessions) {
  if (!sessions || !sessions.length) return null;
  return el("p", { class: "sessions", "data-figure": "sessions" },
    el("span", { class: "muted" }, `${sessions.length} open session${sessions.length === 1 ? "" : "s"}: `),
    ...sessions.slice(0, 20).map(s => el("span", { class: "badge session", "data-session": s.SessionId,
      title: `expires ${s.Expires}` }, `${s.SessionId.slice(0, 8)} → ${s.Instance}`)),
    sessions.length > 20 ? el("span", { class: "muted" }, ` and ${sessions.length - 20} more`) : null);
}

function componentBlock(c) {
  const r = c.Reservation;
  const reserved = [r.NumberOfCpuCoresRequired ? `${r.NumberOfCpuCoresRequired} vCPU` : null,
    r.MinMemoryRequiredInMb ? `${r.MinMemoryRequiredInMb} MiB` : null,
    r.NumberOfAcceleratorDevicesRequired ? `${r.NumberOfAcceleratorDevicesRequired} accelerators` : null]
    .filter(Boolean).join(", ") || "nothing reserved";
  const rows = c.Copies.map(copy => el("tr", {
      class: "copy", "data-copy": copy.CopyId, "data-state": copy.State, "data-instance": copy.Instance },
    el("td", { class: "name" }, copy.CopyId ?? el("span", { class: "muted" }, "–")),
    el("td", {}, copy.Instance ?? el("span", { class: "muted" }, "no instance has room")),
    el("td", {}, el("span", { class: `badge copy-${copy.State}` }, copy.State)),
    el("td", { class: "num" }, copy.InFlight),
    el("td", { class: "num", "data-metric": "CPUUtilizationNormalized" }, percent(copy.Utilization.CPUUtilizationNormalized)),
    el("td", { class: "num", "data-metric": "MemoryUtilizationNormalized" }, percent(copy.Utilization.MemoryUtilizationNormalized)),
    el("td", { class: "num", "data-metric": "GPUUtilizationNormalized" }, percent(copy.Utilization.GPUUtilizationNormalized))));
  return el("div", { class: "component", "data-component": c.InferenceComponentName, "data-status": c.Status },
    el("h4", {}, `inference component ${c.InferenceComponentName}`,
      el("span", { class: "badge component-status" }, c.Status),
      el("small", {}, ` variant ${c.VariantName} · ${c.InstanceType || "no instance type"} · `,
        el("span", { "data-figure": "copies" }, `${c.ReadyCopyCount} ready, ${c.CurrentCopyCount} placed, ${c.DesiredCopyCount} desired`),
        ` · per copy ${reserved} · ${c.Invocations} invocations · ${c.InFlight} in flight`
        + (c.RoutingStrategy ? ` · routing ${c.RoutingStrategy}` : "")
        + (c.ModelLatencyAverageUs ? ` · model latency (avg) ${micros(c.ModelLatencyAverageUs)}` : ""))),
    c.Failure ? el("p", { class: "note" }, `copies failed to start: ${c.Failure}`) : null,
    sessionsLine(c.Sessions),
    rows.length ? el("table", { class: "models copies" },
      el("thead", {}, el("tr", {}, ...["copy", "instance", "state", "in flight", "CPU (normalized)", "memory (normalized)", "GPU (normalized)"].map(h => el("th", {}, h)))),
      el("tbody", {}, ...rows))
      : el("p", { class: "empty" }, "No copy: scaled to zero."));
}

function renderFleet() {
  const blocks = [];
  for (const [name, ep] of Object.entries(state.Endpoints)) {
    const variants = Object.entries(ep.Variants).map(([vname, v]) => el("div", { class: "variant" },
      el("h4", {}, `variant ${vname}`, el("small", {}, ` weight ${v.Weight} · ${v.CurrentInstanceCount} of ${v.DesiredInstanceCount} instances serving`
        + (v.RoutingStrategy && v.RoutingStrategy !== "LEAST_OUTSTANDING_REQUESTS" ? ` · routing ${v.RoutingStrategy}` : ""))),
      sessionsLine(v.Sessions),
      ...v.Instances.map(instance => {
        // A multi-container instance (inference pipeline) lists its containers, each Triton
        // container with its models; it has no budgets of its own.
        const containers = instance.Containers || null;
        const models = instance.Models ?? (containers || []).flatMap(
          c => (c.Models || []).map(m => ({ ...m, ContainerName: c.ContainerName })));
        const head = containers
          ? [el("span", { class: "muted" }, ` ${instance.InFlight} in flight · ${instance.ExecutionMode || ""} containers: `),
             ...containers.map(c => el("span", { class: "badge", title: c.Url || "" }, `${c.ContainerName} (${c.Kind})`))]
          : [el("span", { class: "muted" }, ` ${instance.InFlight} in flight · Triton ${instance.TritonUrl || "-"}`
               + (instance.InstanceType ? ` · ${instance.InstanceType}` : "")
               + (instance.MemoryBudgetBeyondMachine ? " · budget beyond this machine (bookkeeping)" : "")),
             meter("memory", instance.LoadedBytes, instance.MemoryBudgetBytes, "bytes"),
             meter("loaded models", instance.LoadedModelCount, instance.MaxLoadedModels, "count"),
             meter("disk", instance.DiskBytes, instance.DiskBudgetBytes, "bytes")];
        return el("div", { class: `instance${instance.Draining ? " draining" : ""}`, "data-instance": `${vname}/${instance.InstanceId}` },
          el("div", { class: "instance-head" },
            el("strong", {}, instance.InstanceId), instance.Draining ? el("span", { class: "badge state-unloading" }, "draining") : null,
            ...head),
          models.length ? el("table", { class: "models" },
            el("thead", {}, el("tr", {}, ...["LRU", "model", "state", "files", "measured", "of memory budget", "in flight", "on disk", "last used"].map(h => el("th", {}, h)))),
            el("tbody", {}, ...models.map(m => modelRow(name, vname, instance, m))))
            : el("p", { class: "empty" }, "No model yet: the first request for a TargetModel downloads and loads it."));
      })));
    const components = Object.values(ep.InferenceComponents || {}).map(componentBlock);
    blocks.push(el("div", { class: "endpoint", "data-endpoint": name }, el("h3", {}, `endpoint ${name}`),
      deploymentBlock(name, ep.Deployment), ...variants, ...components));
  }
  document.getElementById("fleet").replaceChildren(...blocks);
}

function renderTimeline() {
  const svg = document.getElementById("timeline");
  const buckets = state.Timeline.Buckets;
  const width = 600, height = 140, mid = 70, gap = 1;
  const peak = Math.max(1, ...buckets.map(b => Math.max(b.loads, b.unloads)));
  const barWidth = width / buckets.length;
  const ns = "http://www.w3.org/2000/svg";
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const shapes = [];
  const rect = (x, y, w, h, cls, title) => {
    const r = document.createElementNS(ns, "rect");
    for (const [k, v] of Object.entries({ x, y, width: w, height: h, class: cls })) r.setAttribute(k, v);
    const t = document.createElementNS(ns, "title"); t.textContent = title; r.append(t);
    return r;
  };
  buckets.forEach((b, i) => {
    const x = i * barWidth + gap / 2, w = barWidth - gap;
    const when = `${clock(b.start)}: ${b.loads} loads, ${b.unloads} unloads, ${b.errors} errors`;
    if (b.loads) shapes.push(rect(x, mid - (mid - 8) * b.loads / peak, w, (mid - 8) * b.loads / peak, "load", when));
    if (b.unloads) shapes.push(rect(x, mid, w, (mid - 8) * b.unloads / peak, "unload", when));
    if (b.errors) shapes.push(rect(x, 0, w, 5, "error", when));
  });
  const axis = document.createElementNS(ns, "line");
  for (const [k, v] of Object.entries({ x1: 0, x2: width, y1: mid, y2: mid, class: "axis" })) axis.setAttribute(k, v);
  shapes.push(axis);
  svg.replaceChildren(...shapes);
  const total = buckets.reduce((a, b) => [a[0] + b.loads, a[1] + b.unloads], [0, 0]);
  document.getElementById("timeline-caption").textContent =
    `last ${buckets.length * state.Timeline.BucketSeconds / 60} minutes, ${state.Timeline.BucketSeconds} s bars: ${total[0]} loads, ${total[1]} unloads (peak ${peak} per bar)`;
}

function eventItem(e) {
  const details = Object.entries(e.details)
    .filter(([k]) => k !== "reason" && k !== "for")
    .map(([k, v]) => k === "seconds" ? `${Number(v).toFixed(2)} s` : k === "size" ? bytes(v)
      : k === "gpu_on_cpu" ? "KIND_GPU on CPU (no GPU on this machine)" : `${k} ${v}`);
  const step = e.evicted ? "evicted" : e.step;
  const why = e.evicted ? `least recently used, room for ${e.details.for}` : e.details.reason;
  return el("li", { "data-step": e.step, "data-model": e.model, "data-evicted": e.evicted ? "true" : null },
    el("time", {}, clock(e.time)), " ",
    el("span", { class: `badge step-${step}` }, step), " ",
    el("span", { class: "name" }, e.model || "(the endpoint's model)"),
    el("span", { class: "muted" }, ` on ${e.endpoint}/${e.variant}/${e.instance}`),
    /-green\d+$/.test(e.instance) ? [" ", el("span", { class: "badge generation-green" }, "new fleet")] : null,
    why ? el("span", { class: "note" }, ` · ${why}`) : null,
    details.length ? el("span", { class: "muted" }, ` · ${details.join(", ")}`) : null);
}

function renderEvents() {
  const list = document.getElementById("events");
  const items = state.Events.slice(0, 60).map(eventItem);
  list.replaceChildren(...(items.length ? items : [el("li", { class: "empty" }, "Nothing yet.")]));
}

function activityItem(a) {
  return el("li", { "data-kind": a.kind, "data-endpoint": a.endpoint || null },
    el("time", {}, clock(a.time)), " ",
    el("span", { class: `badge activity-${a.kind}` }, ACTIVITY_LABELS[a.kind] || a.kind), " ",
    a.endpoint ? el("span", { class: "name" }, a.endpoint) : null,
    el("span", {}, ` ${a.text}`));
}

function renderActivity() {
  const items = (state.Activity || []).map(activityItem);
  document.getElementById("activity").replaceChildren(
    ...(items.length ? items : [el("li", { class: "empty" }, "No deployment or scaling activity yet.")]));
}

function renderErrors() {
  const rows = state.Errors.map(e => el("tr", { "data-code": e.code, "data-endpoint": e.endpoint },
    el("td", {}, clock(e.time)), el("td", {}, e.endpoint), el("td", { class: "name" }, e.model ?? "–"),
    el("td", { class: "num" }, e.status), el("td", {}, el("span", { class: "badge code" }, e.code)),
    el("td", { class: "message" }, e.message)));
  document.querySelector("#errors tbody").replaceChildren(
    ...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 6, class: "empty" }, "No errors."))]));
}

function renderAlarms() {
  const rows = (state.Alarms || []).map(a => el("tr", { "data-state": a.State },
    el("td", { class: "name" }, a.Name), el("td", {}, el("span", { class: "badge alarm-state" }, a.State)),
    el("td", {}, clock(a.Since)), el("td", { class: "message" }, a.Reason)));
  document.querySelector("#alarms tbody").replaceChildren(
    ...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 4, class: "empty" }, "No alarms."))]));
}

function renderDetail() {
  const panel = document.getElementById("detail");
  if (!selected) { panel.hidden = true; return; }
  const ep = state.Endpoints[selected.endpoint];
  const instance = ep && ep.Variants[selected.variant]
    && ep.Variants[selected.variant].Instances.find(i => i.InstanceId === selected.instance);
  const model = instance && (instance.Models ?? (instance.Containers || []).flatMap(
      c => (c.Models || []).map(m => ({ ...m, ContainerName: c.ContainerName }))))
    .find(m => m.TargetModel === selected.model);
  panel.hidden = false;
  document.getElementById("detail-title").textContent = selected.model || "(the endpoint's model)";
  const fields = model ? {
    state: STATE_LABELS[displayState(model)], endpoint: selected.endpoint,
    instance: `${selected.variant}/${selected.instance}`, size: bytes(model.SizeBytes),
    "measured memory": model.MeasuredBytes == null ? "not measured yet" : bytes(model.MeasuredBytes),
    "share of memory budget": instance.MemoryBudgetBytes ? `${((model.MemoryBytes ?? model.SizeBytes) / instance.MemoryBudgetBytes * 100).toFixed(1)} %` : "no budget",
    "share of disk budget": instance.DiskBudgetBytes ? `${(model.SizeBytes / instance.DiskBudgetBytes * 100).toFixed(1)} %` : "no budget",
    "LRU position": model.LruPosition ?? "not loaded", "in flight": model.InFlight,
    "on disk": model.OnDisk ? "yes" : "no",
    device: model.KindGpuOnCpu ? "CPU (its KIND_GPU groups: no GPU on this machine)" : "as configured",
    "Triton model": model.TritonModel ?? "–", "last used": ago(model.LastUsed),
  } : { state: "gone (deleted from this instance's disk)" };
  document.getElementById("detail-fields").replaceChildren(
    ...Object.entries(fields).flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  const history = state.Events.filter(e => e.endpoint === selected.endpoint && e.variant === selected.variant
    && e.instance === selected.instance && e.model === selected.model).map(eventItem);
  document.getElementById("detail-events").replaceChildren(
    ...(history.length ? history : [el("li", { class: "empty" }, "No event since the page's server started watching.")]));
}

function render() {
  if (!state) return;
  renderSummary();
  renderFleet();
  renderTimeline();
  renderEvents();
  renderActivity();
  renderErrors();
  renderAlarms();
  renderDetail();
}

function connect() {
  const status = document.getElementById("connection");
  const source = new EventSource("/_emulator/page/stream");
  source.addEventListener("state", message => {
    state = JSON.parse(message.data);
    status.textContent = `live · ${clock(state.Time)}`;
    status.dataset.connected = "true";
    render();
  });
  // The server ends each stream after a few seconds; EventSource reconnects by itself.
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) {
      status.textContent = "disconnected: retrying…";
      status.dataset.connected = "false";
      // With --auth sigv4 the fleet's data needs a signed request that a browser cannot make:
      // say so instead of retrying for ever.
      fetch("/_emulator/page/state").then(response => {
        if (response.status === 403 || response.status === 400) {
          status.textContent = "this emulator runs with --auth sigv4: the page's data needs a " +
            "signed request with emulator:DescribeModels (docs/auth.md)";
        } else {
          setTimeout(connect, 1000);
        }
      }, () => setTimeout(connect, 1000));
    }
  };
}

document.getElementById("detail-close").addEventListener("click", () => { selected = null; render(); });
// The state at the time the page was served: the first paint is the fleet, not an empty shell.
const initial = document.getElementById("initial-state");
if (initial) {
  state = JSON.parse(initial.textContent);
  document.getElementById("connection").textContent = `as of ${clock(state.Time)} · connecting…`;
  render();
}
connect();
