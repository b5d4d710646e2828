// The drawing page of `estimator-mnist serve`. It calls the same TF Serving `:predict` endpoint as any client,
// with the drawing (or a dropped file) as an encoded image in b64, so that the export's in-graph MNIST
// preprocessing makes the digit. One request at a time: while one is out, the newest drawing waits for it.
"use strict";

const pad = document.getElementById("pad");
const pen = pad.getContext("2d");
const barsBox = document.getElementById("bars");
const INFO_PATH = "/estimator-mnist/model";
const INFO_EVERY_MS = 5000;
let modelName = "mnist";
let drawing = false, last = null, hasInk = false, dirty = false, inFlight = false, pendingImage = null;
let showingFile = false;  // a dropped picture is on the pad: drawing starts on a clean one

function makeBars() {
  for (let digit = 0; digit < 10; digit++) {
    const bar = document.createElement("div");
    bar.className = "bar";
    bar.dataset.digit = String(digit);
    bar.innerHTML = '<span class="value"></span><div class="fill"></div><span class="label">' + digit + "</span>";
    barsBox.appendChild(bar);
  }
}

function showProbabilities(probabilities) {
  const best = probabilities.indexOf(Math.max(...probabilities));
  barsBox.querySelectorAll(".bar").forEach((bar, digit) => {
    const p = probabilities[digit];
    bar.dataset.probability = String(p);
    bar.classList.toggle("top", digit === best);
    bar.querySelector(".fill").style.height = (p * 100).toFixed(1) + "%";
    bar.querySelector(".value").textContent = Math.round(p * 100) + "%";
  });
  document.getElementById("digit").textContent = String(best);
  document.getElementById("confidence").textContent = "p = " + probabilities[best].toFixed(3);
}

function resetAnswer() {
  showProbabilities(new Array(10).fill(0));
  barsBox.querySelectorAll(".bar").forEach((bar) => bar.classList.remove("top"));
  document.getElementById("digit").textContent = "?";
  document.getElementById("confidence").textContent = "";
  document.getElementById("answered-by").textContent = "";
}

function say(text) {
  document.getElementById("message").textContent = text;
}

async function predict(b64) {
  const response = await fetch("/v1/models/" + encodeURIComponent(modelName) + ":predict", {
    method: "POST",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({signature_name: "serving_default", instances: [{b64: b64}]}),
  });
  const body = await response.json();
  if (!response.ok) {
    say(body.error || "HTTP " + response.status);
    return;
  }
  say("");
  showProbabilities(body.predictions[0].probabilities);
  const version = response.headers.get("X-Model-Version");
  document.getElementById("answered-by").textContent =
    "answered by " + modelName + (version ? ", version " + version : "");
}

async function sendNewest() {
  if (inFlight || (!dirty && pendingImage === null)) return;
  let b64;
  if (pendingImage !== null) {
    b64 = pendingImage;
    pendingImage = null;
  } else {
    b64 = pad.toDataURL("image/png").split(",")[1];
  }
  dirty = false;
  inFlight = true;
  try {
    await predict(b64);
  } catch (error) {
    say("The server did not answer: " + error);
  } finally {
    inFlight = false;
    sendNewest();
  }
}

function clearPad() {
  pen.fillStyle = "#fff";
  pen.fillRect(0, 0, pad.width, pad.height);
  hasInk = false;
  dirty = false;
  showingFile = false;
  resetAnswer();
}

function pointOf(event) {
  const box = pad.getBoundingClientRect();
  return {x: (event.clientX - box.left) * pad.width / box.width, y: (event.clientY - box.top) * pad.height / box.height};
}

function strokeTo(point) {
  pen.strokeStyle = "#000";
  pen.lineWidth = 20;
  pen.lineCap = "round";
  pen.lineJoin = "round";
  pen.beginPath();
  pen.moveTo(last.x, last.y);
  pen.lineTo(point.x, point.y);
  pen.stroke();
  last = point;
  hasInk = true;
  dirty = true;
  sendNewest();
}

pad.addEventListener("pointerdown", (event) => {
  event.preventDefault();
  if (showingFile) clearPad();
  pad.setPointerCapture(event.pointerId);
  drawing = true;
  last = pointOf(event);
  strokeTo(last);
});
pad.addEventListener("pointermove", (event) => {
  if (drawing) strokeTo(pointOf(event));
});
for (const name of ["pointerup", "pointercancel"]) {
  pad.addEventListener(name, () => {
    drawing = false;
    if (hasInk) {
      dirty = true;
      sendNewest();
    }
  });
}

function classifyFile(file) {
  if (!file) return;
  const reader = new FileReader();
  reader.onload = () => {
    const dataUrl = String(reader.result);
    const picture = new Image();
    picture.onload = () => {  // shown on the pad, fitted; the file itself goes to the model
      clearPad();
      const scale = Math.min(pad.width / picture.width, pad.height / picture.height);
      const w = picture.width * scale, h = picture.height * scale;
      pen.drawImage(picture, (pad.width - w) / 2, (pad.height - h) / 2, w, h);
      showingFile = true;
    };
    picture.src = dataUrl;
    pendingImage = dataUrl.split(",")[1];
    sendNewest();
  };
  reader.readAsDataURL(file);
}

document.addEventListener("dragover", (event) => {
  event.preventDefault();
  document.body.classList.add("dragging");
});
document.addEventListener("dragleave", () => document.body.classList.remove("dragging"));
document.addEventListener("drop", (event) => {
  event.preventDefault();
  document.body.classList.remove("dragging");
  classifyFile(event.dataTransfer.files[0]);
});
document.getElementById("file").addEventListener("change", (event) => classifyFile(event.target.files[0]));
document.getElementById("clear").addEventListener("click", clearPad);

async function showModel() {
  try {
    const info = await (await fetch(INFO_PATH)).json();
    modelName = info.name;
    const facts = ["model " + info.name];
    if (info.version === null) {
      facts.push("no export yet: waiting for the first one");
    } else {
      facts.push("version " + info.version);
      if (info.global_step != null) facts.push("step " + info.global_step);
      if (info.accuracy != null) facts.push("test accuracy " + (info.accuracy * 100).toFixed(2) + "%");
    }
    document.getElementById("model-info").textContent = facts.join(" · ");
  } catch (error) {
    document.getElementById("model-info").textContent = "The server did not answer: " + error;
  }
}

makeBars();
clearPad();
showModel();
setInterval(showModel, INFO_EVERY_MS);
