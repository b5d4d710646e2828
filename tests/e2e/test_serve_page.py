"""The page of `estimator-mnist serve` in a real browser: Debian's headless Chromium, driven by Selenium through
Debian's chromium-driver (paths given, SE_OFFLINE: Selenium downloads nothing), on a model trained for a few
hundred steps. Digits drawn with mouse strokes along polylines get their class and bars; a dropped PNG gets the
same answer as a Serving client; the page fits a phone's width; a screenshot is saved."""

import base64
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import requests

from estimator_mnist.model_files.checkpoints import read_eval_results
from tests.helpers import REPO
from tests.serve_helpers import Server
from tests.system_packages import require_debian_packages

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
STEPS = 300
JOB_YAML = """
cluster: {{chief: ["localhost:2222"]}}
strategy: {{name: one_device}}
training: {{batch_size_per_replica: 64, max_steps: {steps}, save_checkpoints_steps: {steps}, log_step_count_steps: 100}}
evaluation: {{throttle_secs: 0, start_delay_secs: 0}}
data_dir: {data_dir}
"""
# Strokes in the canvas' own pixels (280 x 280), drawn as a person would draw these digits.
ONE = [(150, 40), (140, 140), (135, 240)]
SEVEN = [(70, 50), (210, 50), (160, 140), (120, 240)]
SETTLED = ("return !inFlight && !dirty && pendingImage === null && "
           "document.getElementById('answered-by').textContent !== ''")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, mnist_data_dir):
    """A model_dir with the export and evaluation of a short single-process run."""
    tmp_path = tmp_path_factory.mktemp("serve_page")
    job = tmp_path / "job.yaml"
    job.write_text(JOB_YAML.format(steps=STEPS, data_dir=mnist_data_dir))
    proc = subprocess.run([sys.executable, "-m", "estimator_mnist", "train", "--cluster", str(job), "--model-dir",
                           str(tmp_path / "model"), "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=600, cwd=REPO,
                          env={k: v for k, v in os.environ.items() if k != "TF_CONFIG"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    evaluation = read_eval_results(str(tmp_path / "model"))[-1]
    return {"model_dir": tmp_path / "model", "evaluation": evaluation, "tmp": tmp_path}


@pytest.fixture(scope="module")
def page(trained):
    require_debian_packages("chromium", "chromium-driver")
    offline = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not look for a browser or driver to download
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                     "--window-size=1000,800",
                     f"--user-data-dir={trained['tmp'] / 'chromium-profile'}"):
        options.add_argument(argument)
    server = Server(trained["model_dir"])
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        driver.get(server.url("/"))
        yield driver, server
    finally:
        driver.quit()
        server.stop()
        if offline is None:
            os.environ.pop("SE_OFFLINE")


def settle(driver, timeout=60):
    deadline = time.monotonic() + timeout
    while not driver.execute_script(SETTLED):
        assert time.monotonic() < deadline, driver.find_element("id", "message").text
        time.sleep(0.1)


def draw(driver, polyline):
    """Mouse strokes along the polyline, every 10 canvas pixels, as a person's pointer moves."""
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    pad = driver.find_element("id", "pad")
    scale = pad.rect["width"] / 280.0
    actions = ActionBuilder(driver, duration=10)
    pointer = actions.pointer_action

    def at(x, y):  # WebDriver's element offsets are from the element's centre
        pointer.move_to(pad, int((x - 140) * scale), int((y - 140) * scale))

    at(*polyline[0])
    pointer.pointer_down()
    for (x0, y0), (x1, y1) in zip(polyline, polyline[1:]):
        steps = max(1, int(np.hypot(x1 - x0, y1 - y0) // 10))
        for step in range(1, steps + 1):
            at(x0 + (x1 - x0) * step / steps, y0 + (y1 - y0) * step / steps)
    pointer.pointer_up()
    actions.perform()


def answer(driver):
    bars = driver.find_elements("css selector", "#bars .bar")
    probabilities = [float(bar.get_attribute("data-probability")) for bar in bars]
    return driver.find_element("id", "digit").text, probabilities


@pytest.mark.parametrize("digit,polyline", [("1", ONE), ("7", SEVEN)], ids=["one", "seven"])
def test_a_drawn_digit_gets_its_class_and_the_bars(page, digit, polyline):
    driver, _ = page
    driver.find_element("id", "clear").click()
    assert driver.find_element("id", "digit").text == "?"
    draw(driver, polyline)
    settle(driver)
    shown, probabilities = answer(driver)
    assert shown == digit, probabilities
    assert len(probabilities) == 10 and abs(sum(probabilities) - 1) < 1e-3 and np.argmax(probabilities) == int(digit)
    assert "answered by mnist, version" in driver.find_element("id", "answered-by").text


def test_a_dropped_png_gets_the_answer_a_serving_client_gets(page, mnist_data_dir):
    import tensorflow as tf

    from estimator_mnist.tf_task.data import load_split

    driver, server = page
    images, _ = next(iter(load_split("test", mnist_data_dir).batch(1)))
    png = base64.b64encode(tf.io.encode_png(images[0]).numpy()).decode()
    expected = server.predict({"instances": [{"b64": png}]}).json()["predictions"][0]["class_ids"]
    driver.find_element("id", "clear").click()
    driver.execute_script("""
        const bytes = Uint8Array.from(atob(arguments[0]), c => c.charCodeAt(0));
        const files = new DataTransfer();
        files.items.add(new File([bytes], "digit.png", {type: "image/png"}));
        document.getElementById("pad").dispatchEvent(
            new DragEvent("drop", {dataTransfer: files, bubbles: true, cancelable: true}));""", png)
    settle(driver)
    assert answer(driver)[0] == str(expected)


def test_the_page_names_the_version_its_step_and_accuracy_and_fits_a_phone(page, trained, tmp_path):
    driver, server = page
    version = requests.get(server.url("/estimator-mnist/model"), timeout=10).json()["version"]
    evaluation = trained["evaluation"]
    info = driver.find_element("id", "model-info").text
    assert f"version {version}" in info and f"step {evaluation['global_step']}" in info
    assert f"test accuracy {evaluation['accuracy'] * 100:.2f}%" in info
    screenshot = tmp_path / "serve_page.png"
    assert driver.save_screenshot(str(screenshot)) and screenshot.read_bytes()[:4] == b"\x89PNG"
    print(f"screenshot: {screenshot}")
    driver.set_window_size(390, 844)  # a phone's width
    assert driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    driver.set_window_size(1000, 800)
