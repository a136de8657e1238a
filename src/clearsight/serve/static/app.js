// clearsight page: pick an image, a task and a model; POST it to the JSON API; show the
// result (before/after slider, or labelled boxes), the latency and a download link.
// A video is a job (POST /v1/jobs): its progress is polled, then input and result play
// side by side.
"use strict";
const $ = (id) => document.getElementById(id);
const state = { models: [], file: null, url: null, resultUrl: null, job: null };
const VIDEO_NAME = /\.(mp4|mov|mkv|avi|webm|m4v)$/i;

function isVideo(file) { return file.type.startsWith("video/") || VIDEO_NAME.test(file.name); }
const TASK_NAMES = { derain: "Remove rain", demoire: "Remove moiré", detect: "Detect objects" };

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = false;
}

function clearError() { $("error").hidden = true; $("error").textContent = ""; }

async function loadModels() {
  try {
    const resp = await fetch("/v1/models");
    const body = await resp.json();
    if (!resp.ok) throw new Error(body.error || resp.statusText);
    state.models = body.models;
  } catch (err) {
    showError("Could not list the server's models: " + err.message);
    return;
  }
  const tasks = [];
  for (const m of state.models) for (const t of m.tasks) if (!tasks.includes(t)) tasks.push(t);
  tasks.sort((a, b) => Object.keys(TASK_NAMES).indexOf(a) - Object.keys(TASK_NAMES).indexOf(b));
  $("task").innerHTML = "";
  for (const t of tasks) $("task").add(new Option(TASK_NAMES[t] || t, t));
  fillModels();
}

function fillModels() {
  const task = $("task").value;
  $("model").innerHTML = "";
  for (const m of state.models) if (m.tasks.includes(task)) $("model").add(new Option(m.name, m.name));
  showOptions();
}

function showOptions() {
  const task = $("task").value;
  for (const el of document.querySelectorAll(".restore-only")) el.hidden = task === "detect";
  for (const el of document.querySelectorAll(".detect-only")) el.hidden = task !== "detect";
  const video = state.file !== null && isVideo(state.file);
  for (const el of document.querySelectorAll(".video-only")) el.hidden = !video || task === "detect";
  updateRun();
}

function updateRun() { $("run").disabled = !(state.file && $("model").value); }

function setFile(file) {
  if (!file) return;
  clearError();
  state.file = file;
  if (state.url) URL.revokeObjectURL(state.url);
  state.url = URL.createObjectURL(file);
  $("thumb").hidden = isVideo(file);
  if (!isVideo(file)) $("thumb").src = state.url;
  $("drop-text").textContent = file.name + " (" + (file.size / 1024).toFixed(0) + " KB)";
  showOptions();
}

function setProgress(text, fraction) {
  $("progress").hidden = false;
  $("progress-text").textContent = text;
  const bar = $("progress").querySelector(".bar");
  bar.classList.toggle("busy", fraction === null);
  $("bar-fill").style.width = fraction === null ? "" : (fraction * 100).toFixed(0) + "%";
}

function post(url, data) {
  // XMLHttpRequest, not fetch: it reports upload progress
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", url);
    xhr.responseType = "json";
    const started = performance.now();
    let timer = null;
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) setProgress("uploading…", e.loaded / e.total);
    };
    xhr.upload.onload = () => {
      const tick = () => setProgress(
        "working… " + ((performance.now() - started) / 1000).toFixed(1) + " s", null);
      tick();
      timer = setInterval(tick, 200);
    };
    xhr.onload = () => {
      clearInterval(timer);
      const body = xhr.response;
      if (xhr.status >= 200 && xhr.status < 300 && body) resolve(body);
      else reject(new Error((body && body.error) || "the server answered " + xhr.status));
    };
    xhr.onerror = () => { clearInterval(timer); reject(new Error("the server could not be reached")); };
    xhr.send(data);
  });
}

function pngUrl(b64) {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  if (state.resultUrl) URL.revokeObjectURL(state.resultUrl);
  state.resultUrl = URL.createObjectURL(new Blob([bytes], { type: "image/png" }));
  return state.resultUrl;
}

function stem() { return (state.file.name.replace(/\.[^.]*$/, "") || "image"); }

function showRestored(body) {
  $("detections").hidden = true;
  $("videos").hidden = true;
  $("compare").hidden = false;
  $("before").src = state.url;
  $("after").src = pngUrl(body.image_png);
  setSplit(50);
  $("split").value = 50;
  $("download").href = state.resultUrl;
  $("download").download = stem() + "-" + body.model + ".png";
}

function colour(i) { return "hsl(" + Math.round((i * 137.508) % 360) + ", 85%, 45%)"; }

function showDetections(body) {
  $("compare").hidden = true;
  $("videos").hidden = true;
  $("detections").hidden = false;
  $("det-image").src = state.url;
  const boxes = $("boxes");
  boxes.innerHTML = "";
  $("det-list").innerHTML = "";
  body.results.forEach((r, i) => {
    const [x, y, w, h] = r.bbox;
    const box = document.createElement("div");
    box.className = "box";
    box.style.left = (100 * x / body.width) + "%";
    box.style.top = (100 * y / body.height) + "%";
    box.style.width = (100 * w / body.width) + "%";
    box.style.height = (100 * h / body.height) + "%";
    box.style.borderColor = colour(r.category_id);
    const label = document.createElement("span");
    label.textContent = r.name + " " + r.score.toFixed(2);
    label.style.background = colour(r.category_id);
    if (y / body.height < 0.08) label.className = "inside"; // no room above: label inside

    box.appendChild(label);
    boxes.appendChild(box);
    const li = document.createElement("li");
    li.textContent = label.textContent;
    $("det-list").appendChild(li);
  });
  if (!body.results.length) $("det-list").innerHTML = "<li>nothing found above the threshold</li>";
  $("download").href = pngUrl(body.image_png);
  $("download").download = stem() + "-detections.png";
  boxes.dataset.count = String(body.results.length);
}

function setSplit(pct) {
  $("after-wrap").style.clipPath = "inset(0 0 0 " + pct + "%)";
  $("divider").style.left = pct + "%";
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function jobText(body) {
  const p = body.progress;
  let text = body.status + " · frame " + p.frames_done;
  if (p.total_frames) text += " of " + p.total_frames;
  if (p.fps) text += " · " + p.fps.toFixed(1) + " fps";
  if (p.eta_s !== null) text += " · " + Math.ceil(p.eta_s) + " s left";
  return text;
}

async function runJob(task) {
  const data = new FormData();
  data.append("video", state.file);
  data.append("model", $("model").value);
  if (task === "detect") {
    data.append("score_threshold", $("score").value || "0.3");
  } else {
    data.append("tta", $("tta").value);
    if ($("tile").value !== "") data.append("tile", $("tile").value);
    if ($("temporal").checked) data.append("temporal", "true");
  }
  let body = await post("/v1/jobs", data);
  state.job = body.id;
  $("cancel").hidden = false;
  while (body.status === "queued" || body.status === "running") {
    const p = body.progress;
    setProgress(jobText(body), p.total_frames ? p.frames_done / p.total_frames : null);
    await sleep(500);
    const resp = await fetch(body.urls.status);
    const next = await resp.json();
    if (!resp.ok) throw new Error(next.error || resp.statusText);
    body = next;
  }
  if (body.status === "failed") throw new Error(body.error);
  if (body.status !== "done") throw new Error("the job was " + body.status);
  $("compare").hidden = true;
  $("detections").hidden = true;
  $("videos").hidden = false;
  $("video-before").src = state.url;
  $("video-after").src = body.urls.result;
  $("download").href = body.urls.result;
  $("download").download = stem() + "-" + body.model + ".mp4";
  $("download-lines").hidden = !body.urls.detections;
  if (body.urls.detections) {
    $("download-lines").href = body.urls.detections;
    $("download-lines").download = stem() + "-detections.jsonl";
  }
  $("latency").textContent = body.model + " · " + body.progress.frames_done + " frames · " +
    (body.finished - body.started).toFixed(1) + " s";
  $("result").hidden = false;
}

function cancelJob() {
  if (state.job) fetch("/v1/jobs/" + state.job, { method: "DELETE" });
}

async function run(event) {
  event.preventDefault();
  if (!state.file) return;
  clearError();
  $("result").hidden = true;
  $("run").disabled = true;
  const task = $("task").value;
  if (isVideo(state.file)) {
    try {
      await runJob(task);
    } catch (err) {
      showError(err.message);
    } finally {
      state.job = null;
      $("cancel").hidden = true;
      $("progress").hidden = true;
      updateRun();
    }
    return;
  }
  const data = new FormData();
  data.append("image", state.file);
  data.append("model", $("model").value);
  let url = "/v1/restore";
  if (task === "detect") {
    url = "/v1/detect";
    data.append("score_threshold", $("score").value || "0.3");
    data.append("draw", "true");
  } else {
    data.append("format", "json");
    data.append("tta", $("tta").value);
    if ($("tile").value !== "") data.append("tile", $("tile").value);
  }
  try {
    const body = await post(url, data);
    $("download-lines").hidden = true;
    if (task === "detect") showDetections(body); else showRestored(body);
    $("latency").textContent = body.model + " · " + body.width + "×" + body.height +
      " · " + body.latency_ms.toFixed(0) + " ms";
    $("result").hidden = false;
  } catch (err) {
    showError(err.message);
  } finally {
    $("progress").hidden = true;
    updateRun();
  }
}

$("file").addEventListener("change", () => setFile($("file").files[0]));
$("task").addEventListener("change", fillModels);
$("model").addEventListener("change", updateRun);
$("split").addEventListener("input", () => setSplit($("split").value));
$("cancel").addEventListener("click", cancelJob);
$("form").addEventListener("submit", run);
const drop = $("drop");
for (const kind of ["dragenter", "dragover"]) drop.addEventListener(kind, (e) => {
  e.preventDefault(); drop.classList.add("over");
});
for (const kind of ["dragleave", "drop"]) drop.addEventListener(kind, (e) => {
  e.preventDefault(); drop.classList.remove("over");
});
drop.addEventListener("drop", (e) => setFile(e.dataTransfer.files[0]));
loadModels();
