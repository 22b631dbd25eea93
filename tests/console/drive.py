"""Drives the console in Debian's Chromium (/usr/bin/chromium, headless) with Playwright's
sync API (PyPI `playwright`, pinned in tests/requirements.txt); Playwright's own browser
download is never used.

Driven by tests/tests/console.rs: one argument, a JSON object. With "mode": "tls", only
{"url" (https), "screenshots", "alice"}: a sign-in and its cookie. Otherwise {"url",
"screenshots" (a directory), "alice" (an admin person's token), "bob" (a non-admin
person's token), "api_token" (no person), "good" and "bad" (two finished checks runs of
scenario smoke, the second failed with findings), "finding" (one of them, open),
"capacity" (a finished capacity run), "faults" and "faults_after" (two finished runs of
one faults experiment), "schedule" (an
enabled schedule), "agent" (the agent's name)}.

Plots drawn on the server are checked without a screenshot: `plot_marks` counts an SVG
plot's elements by their data attributes (each line with its points and a stroke of some
length, threshold and SLO lines, warm-up bands, knees, verdict dots). The pages are also
opened 420 px wide, where the document must not be wider than the window.

It asks the test to act by printing {"ask": WHAT} and reads one JSON line back:
"start_load" (answered {"id"} once the load run is running), "open_console" and
"close_console" (after `iohr-controller account open-console` or `close-console`). Its
last line is one JSON object of what it saw; the Rust test asserts on it. Each wait is
bounded: an element that never appears fails the run with a screenshot (failure.png) and
the page's text on stderr.
"""

import json
import os
import re
import sys
from urllib.parse import urlparse

from playwright.sync_api import expect, sync_playwright

CHROMIUM = "/usr/bin/chromium"
# As the machine's notes say: without the background-networking flags Chromium dials
# Google's hosts, which this closed network refuses. Playwright's launch() adds a fresh
# temporary --user-data-dir of its own (it refuses one in args) and removes it after.
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
STEP_MS = 15_000  # one page action or expectation
LIVE_MS = 60_000  # a live run: the next second drawn, or its end

NAV = ["runs", "scenarios", "findings", "schedules", "agents", "compare"]


def ask(what):
    print(json.dumps({"ask": what}), flush=True)
    line = sys.stdin.readline()
    if not line:
        raise RuntimeError(f"no answer from the test to {what}")
    return json.loads(line)


def path_of(url):
    return urlparse(url).path


class Console:
    def __init__(self, cfg, browser):
        self.cfg = cfg
        self.browser = browser
        self.shots = []
        self.pages = {}
        self.current = None

    def person(self):
        # Over TLS (mode "tls") the controller's own CA signs its certificate; this
        # browser has no way to trust it but to ignore certificate errors.
        context = self.browser.new_context(
            base_url=self.cfg["url"], ignore_https_errors=self.cfg["url"].startswith("https:"))
        context.set_default_timeout(STEP_MS)
        page = context.new_page()
        self.current = page
        return context, page

    def shot(self, page, name):
        file = f"{name}.png"
        page.screenshot(path=os.path.join(self.cfg["screenshots"], file), full_page=True)
        self.shots.append(file)

    def goto(self, page, path):
        """Opens `path`; returns (status of the first answer, final path)."""
        self.current = page
        response = page.goto(path)
        first = response.request
        while first.redirected_from is not None:
            first = first.redirected_from
        status = first.response().status if first.response() else response.status
        return status, path_of(page.url)

    def look(self, page, name):
        """Checks the page's name and navigation; records them under `name`."""
        expect(page.locator("body")).to_have_attribute("data-page", name)
        self.pages[name] = {
            "data_page": page.locator("body").get_attribute("data-page"),
            "nav": [n for n in NAV if page.locator(f'a[data-nav="{n}"]').count() == 1],
            "sign_out": page.locator("form#sign-out").count() == 1,
        }

    def refusal(self, page):
        refusal = page.locator("#refusal")
        expect(refusal).to_be_visible()
        return refusal.get_attribute("data-code")

    def submit(self, page, form):
        """Submits `form` (a locator) by its button; returns (status, final path) of the
        POST's answer, following a 303."""
        with page.expect_response(lambda r: r.request.method == "POST") as posted:
            with page.expect_navigation():
                form.locator("button, input[type=submit]").first.click()
        return posted.value.status, path_of(page.url)

    def sign_in(self, page, token):
        self.goto(page, "/sign-in")
        form = page.locator("form#sign-in")
        form.locator('input[name="token"]').fill(token)
        return self.submit(page, form)

    def run_ids(self, page):
        return page.locator("table#runs tr[data-run-id]").evaluate_all(
            "rows => rows.map(r => r.dataset.runId)")


def signed_out(c, page):
    root = c.goto(page, "/")
    runs = c.goto(page, "/runs")
    c.goto(page, "/sign-in")
    token = page.locator('form#sign-in input[name="token"]')
    expect(token).to_be_visible()
    c.shot(page, "sign-in")
    return {"root": list(root), "runs": list(runs),
            "token_input_type": token.get_attribute("type")}


def refused(c, page, token, shot):
    status, _ = c.sign_in(page, token)
    code = c.refusal(page)
    if shot:
        c.shot(page, shot)
    return [status, code]


def cookie_of(context, page):
    cookies = [k for k in context.cookies() if k["name"] == "iohr_session"]
    if len(cookies) != 1:
        raise RuntimeError(f"one iohr_session cookie expected: {context.cookies()}")
    cookie = cookies[0]
    return {
        "http_only": cookie["httpOnly"],
        "same_site": cookie["sameSite"],
        "secure": cookie["secure"],
        "visible_to_script": "iohr_session" in page.evaluate("document.cookie"),
        "value": cookie["value"],
    }


def watch_live(c, context, runs_page):
    """Starts the load run, then watches it on its page and in the runs list at once."""
    load = ask("start_load")["id"]
    c.goto(runs_page, "/runs")
    c.look(runs_page, "runs")
    row = runs_page.locator(f'table#runs tr[data-run-id="{load}"]')
    expect(row).to_have_count(1)
    row_before = row.get_attribute("data-status")
    # A mark on each window: still there at the end means the page was never reloaded.
    runs_page.evaluate("window.__iohrMark = 1")

    page = context.new_page()
    c.goto(page, f"/runs/{load}")
    c.look(page, "run")
    page.evaluate("window.__iohrMark = 1")
    plot = page.locator("div#plot")
    expect(plot).to_have_attribute("data-seconds", re.compile(r"^\d+$"))
    seconds = [int(plot.get_attribute("data-seconds"))]
    for _ in range(3):
        page.wait_for_function(
            "n => Number(document.querySelector('#plot').dataset.seconds) > n",
            arg=seconds[-1], timeout=LIVE_MS)
        seconds.append(int(plot.get_attribute("data-seconds")))
    c.shot(page, "run-load-live")
    thresholds_drawn = plot.get_attribute("data-thresholds-drawn")
    expect(page.locator("#status")).to_have_attribute("data-status", "passed", timeout=LIVE_MS)
    # Ended: the record and the result are swapped in from the page, without a reload.
    page.wait_for_function("() => document.body.dataset.ended === '1'", timeout=LIVE_MS)
    final_seconds = int(plot.get_attribute("data-seconds"))
    result = page.locator("#outcome #summary").inner_text()
    c.shot(page, "run-load")
    run_reloaded = page.evaluate("window.__iohrMark !== 1")

    status_cell = row.locator("td.status")
    expect(status_cell).to_contain_text("passed", timeout=LIVE_MS)
    live = {
        "id": load,
        "seconds": seconds,
        "final_seconds": final_seconds,
        "thresholds_drawn": thresholds_drawn,
        "warmup_seconds": plot.get_attribute("data-warmup"),
        "run_status": page.locator("#status").get_attribute("data-status"),
        "run_page_reloaded": run_reloaded,
        "result": result,
        "row_status_before": row_before,
        "row_status_after": status_cell.inner_text(),
        "runs_page_reloaded": runs_page.evaluate("window.__iohrMark !== 1"),
    }
    c.shot(runs_page, "runs")
    page.close()
    return live


def plot_marks(page, plot_id):
    """What a server-drawn plot draws, counted from its SVG elements and their data
    attributes: per run, each series with its point count and whether its stroke has a
    length; the threshold and SLO lines, warm-up bands, knees and verdict dots."""
    return page.evaluate("""id => {
        const svg = document.getElementById(id);
        if (!svg) return null;
        const runs = {};
        svg.querySelectorAll('path[data-series]').forEach(p => {
            (runs[p.dataset.run] = runs[p.dataset.run] || []).push(
                [p.dataset.series, Number(p.dataset.points), p.getTotalLength() > 0]);
        });
        const all = sel => Array.from(svg.querySelectorAll(sel));
        return {
            series: runs,
            thresholds: all('line[data-threshold]').map(l => l.dataset.threshold),
            slo: all('line[data-slo]').length,
            warmup: all('rect[data-warmup]').map(r => [r.dataset.warmup, r.getBBox().width > 0]),
            knees: all('circle[data-knee]').map(k => k.dataset.knee),
            verdicts: all('circle[data-verdict]').map(k => k.dataset.verdict),
        };
    }""", plot_id)


def operation_plots(page):
    """Each operation's plot, in the page's order: its name and what it draws."""
    found = page.locator("section.operation").evaluate_all(
        "ss => ss.map(s => [s.dataset.operation, (s.querySelector('svg.plot') || {}).id || null])")
    return [[name, plot_marks(page, plot) if plot else None] for name, plot in found]


def run_again(c, page, load):
    """The finished load run's plots, then the same run started again from its page."""
    c.goto(page, f"/runs/{load}")
    expect(page.locator("svg#seconds-plot")).to_be_visible()
    seen = {"seconds": plot_marks(page, "seconds-plot"),
            "latency": plot_marks(page, "latency-plot"),
            "live_plot_after_end": page.locator("div#plot").count(),
            "operation_plots": operation_plots(page),
            "operations": page.locator("table#operations tr[data-operation]").evaluate_all(
                "rows => rows.map(r => r.dataset.operation)")}
    c.shot(page, "run-load-finished")
    form = page.locator("form#again")
    with page.expect_navigation():
        form.locator("button").click()
    again = path_of(page.url).removeprefix("/runs/")
    seen["id"] = again
    expect(page.locator("#status")).to_have_attribute("data-status", "passed", timeout=LIVE_MS * 2)
    return seen


PHONE_PAGES = ["/runs", "/compare", "/scenarios", "/findings", "/schedules", "/agents"]


def phone(c, page, extra):
    """Each page at a phone's 420 px: [scrollWidth, clientWidth] of the document."""
    page.set_viewport_size({"width": 420, "height": 900})
    widths = {}
    for path in PHONE_PAGES + extra:
        c.goto(page, path)
        expect(page.locator("main")).to_be_visible()
        widths[path] = page.evaluate(
            "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    c.goto(page, "/runs")
    c.shot(page, "phone-runs")
    page.set_viewport_size({"width": 1280, "height": 900})
    return widths


def finished_run(c, page):
    c.goto(page, f"/runs/{c.cfg['bad']}")
    expect(page.locator("#status")).to_have_attribute("data-status", "failed")
    rows = page.locator("table#findings tr[data-finding-id]")
    expect(rows.first).to_be_visible()
    c.shot(page, "run-checks")
    return {
        "status": page.locator("#status").get_attribute("data-status"),
        "record": page.locator("dl#record").inner_text(),
        "rerun": page.locator("#rerun").inner_text(),
        "findings": rows.evaluate_all("rows => rows.map(r => r.dataset.findingId)"),
    }


def capacity(c, page):
    """A finished sweep: its points as data, its plot drawn on the server."""
    c.goto(page, f"/runs/{c.cfg['capacity']}")
    sweep = page.locator("svg#sweep-plot")
    expect(sweep).to_be_visible()
    c.shot(page, "run-capacity")
    return {"plot": plot_marks(page, "sweep-plot")}


def timeline(c, page):
    """A finished faults run: its timeline's lines, replayed from the feed."""
    c.goto(page, f"/runs/{c.cfg['faults']}")
    page.wait_for_function(
        "() => document.body.dataset.ended === '1' && "
        "document.querySelectorAll('ol#timeline > li').length > 0")
    c.shot(page, "run-faults")
    return page.locator("ol#timeline > li").all_inner_texts()


def options(page, name):
    """The run ids a compare picker offers."""
    return page.locator(f'form#compare select[name="{name}"] option').evaluate_all(
        "os => os.map(o => o.value).filter(v => v)")


def compare(c, page, load, again):
    c.goto(page, "/compare")
    c.look(page, "compare")
    form = page.locator("form#compare")
    seen = {"before_options_at_first": options(page, "before")}
    # Picking the after run asks the page again: the before picker then offers only the
    # runs that compare with it.
    with page.expect_navigation():
        form.locator('select[name="after"]').select_option(c.cfg["bad"])
    seen["before_options_for_bad"] = options(page, "before")
    form.locator('select[name="before"]').select_option(c.cfg["good"])
    with page.expect_navigation():
        form.locator("button, input[type=submit]").first.click()
    verdict = page.locator("#verdict")
    expect(verdict).to_have_attribute("data-verdict", re.compile(r"\w+"))
    c.shot(page, "compare")
    seen.update({
        "verdict": verdict.get_attribute("data-verdict"),
        "differences": page.locator("ul#differences > li").all_inner_texts(),
        "markdown": page.locator("pre#markdown").inner_text(),
        "checks_plots": page.locator("svg.plot").count(),
    })
    status, _ = c.goto(page, f"/compare?before={c.cfg['good']}&after={load}")
    seen["not_comparable"] = [status, c.refusal(page)]
    c.shot(page, "compare-refused")

    # Two load runs of one scenario version and target: both on one plot.
    c.goto(page, f"/compare?after={again}")
    seen["before_options_for_again"] = options(page, "before")
    c.goto(page, f"/compare?before={load}&after={again}")
    # A verdict, or on a busy machine the refusal of a saturated generator: both plot.
    expect(page.locator("svg#seconds-plot")).to_be_visible()
    verdict = page.locator("#verdict")
    seen["load_verdict"] = (verdict.get_attribute("data-verdict") if verdict.count()
                            else page.locator("#refusal").get_attribute("data-code"))
    seen["load_seconds"] = plot_marks(page, "seconds-plot")
    seen["load_latency"] = plot_marks(page, "latency-plot")
    seen["load_operations"] = operation_plots(page)
    c.shot(page, "compare-load")
    return seen


def scenario_runs(c, page):
    """Two finished scenario runs of one version: the after run's page draws each
    operation's seconds; compared, both runs on each operation's plot."""
    before, after = c.cfg["scenario_before"], c.cfg["scenario_after"]
    c.goto(page, f"/runs/{after}")
    expect(page.locator("section.operation svg.plot").first).to_be_visible()
    seen = {"run": operation_plots(page)}
    c.shot(page, "run-scenario")
    c.goto(page, f"/compare?after={after}")
    seen["before_options"] = options(page, "before")
    c.goto(page, f"/compare?before={before}&after={after}")
    verdict = page.locator("#verdict")
    expect(verdict).to_have_attribute("data-verdict", re.compile(r"\w+"))
    seen["verdict"] = verdict.get_attribute("data-verdict")
    seen["differences"] = page.locator("ul#differences > li").all_inner_texts()
    seen["compare"] = operation_plots(page)
    c.shot(page, "compare-scenario")
    return seen


def faults_runs(c, page):
    """Two finished faults runs of one experiment and target, compared: a verdict."""
    before, after = c.cfg["faults"], c.cfg["faults_after"]
    c.goto(page, f"/compare?after={after}")
    seen = {"before_options": options(page, "before")}
    c.goto(page, f"/compare?before={before}&after={after}")
    verdict = page.locator("#verdict")
    expect(verdict).to_have_attribute("data-verdict", re.compile(r"\w+"))
    seen["verdict"] = verdict.get_attribute("data-verdict")
    seen["differences"] = page.locator("ul#differences > li").all_inner_texts()
    c.shot(page, "compare-faults")
    return seen


def close_finding(c, page):
    finding = c.cfg["finding"]
    row_css = f'table#findings tr[data-finding-id="{finding}"]'
    seen = {}
    for case, script in [
        ("without_csrf", "f => f.querySelector('input[name=csrf]').remove()"),
        ("wrong_csrf", "f => { f.querySelector('input[name=csrf]').value = 'x' + f.querySelector('input[name=csrf]').value }"),
    ]:
        c.goto(page, "/findings?status=open")
        form = page.locator(f"{row_css} form.close")
        form.evaluate(script)
        status, _ = c.submit(page, form)
        seen[case] = [status, c.refusal(page)]
    c.shot(page, "findings-csrf-refused")

    c.goto(page, "/findings?status=open")
    c.look(page, "findings")
    row = page.locator(row_css)
    expect(row).to_have_attribute("data-status", "open")
    seen["still_open"] = True
    c.shot(page, "findings")
    seen["closed_redirect"] = list(c.submit(page, row.locator("form.close")))
    c.goto(page, "/findings?status=closed")
    expect(row).to_have_count(1)
    seen["status_after"] = row.get_attribute("data-status")
    c.shot(page, "findings-closed")
    return seen


def filters(c, page, load):
    seen = {}
    c.goto(page, "/runs")
    seen["all"] = c.run_ids(page)
    for name, field, value in [
        ("failed", "select[name=status]", "failed"),
        ("load", "select[name=kind]", "load"),
        ("smoke", "input[name=scenario]", "smoke"),
        ("staging", "input[name=environment]", "staging"),
        ("production", "input[name=environment]", "production"),
    ]:
        c.goto(page, "/runs")
        form = page.locator("form#filter")
        field = form.locator(field)
        if field.evaluate("e => e.tagName") == "SELECT":
            field.select_option(value)
        else:
            field.fill(value)
        with page.expect_navigation():
            form.locator("button, input[type=submit]").first.click()
        expect(page.locator("table#runs")).to_be_attached()
        seen[name] = c.run_ids(page)
        if name == "failed":
            c.shot(page, "runs-filtered")
    return seen


def scenarios(c, page):
    c.goto(page, "/scenarios")
    c.look(page, "scenarios")
    rows = page.locator("table#scenarios tr[data-scenario-id]")
    expect(rows.first).to_be_visible()
    c.shot(page, "scenarios")
    count = rows.count()
    smoke = rows.filter(has_text="smoke")
    expect(smoke).to_have_count(1)
    scenario = smoke.get_attribute("data-scenario-id")
    c.goto(page, f"/scenarios/{scenario}")
    versions = page.locator("table#versions tr[data-version]")
    expect(versions.first).to_be_visible()
    c.shot(page, "scenario")
    runs = page.locator('a[href^="/runs/"]').evaluate_all(
        "links => links.map(a => a.getAttribute('href').slice('/runs/'.length))")
    return {"count": count, "versions": versions.count(), "runs": runs,
            "trend": plot_marks(page, "trend-plot"), "start_form": page.locator("form#start").count()}


def schedules(c, page):
    c.goto(page, "/schedules")
    c.look(page, "schedules")
    row = page.locator(f'table#schedules tr[data-schedule-id="{c.cfg["schedule"]}"]')
    enabled = [row.get_attribute("data-enabled")]
    c.shot(page, "schedules")
    for form in ["pause", "resume"]:
        c.submit(page, row.locator(f"form.{form}"))
        c.goto(page, "/schedules")
        enabled.append(row.get_attribute("data-enabled"))
        if form == "pause":
            c.shot(page, "schedules-paused")
    return {"enabled": enabled}


def agents(c, page):
    c.goto(page, "/agents")
    c.look(page, "agents")
    row = page.locator(f'table#agents tr[data-agent-name="{c.cfg["agent"]}"]')
    expect(row).to_have_count(1)
    c.shot(page, "agents")
    return {"state": row.get_attribute("data-state"), "text": row.inner_text()}


def drive(c):
    seen = {}
    context, page = c.person()
    seen["signed_out"] = signed_out(c, page)
    seen["refusals"] = {
        "unknown": refused(c, page, "iohr_no_such_token", "sign-in-refused"),
        "api_token": refused(c, page, c.cfg["api_token"], None),
        "bob": refused(c, page, c.cfg["bob"], "sign-in-bob-refused"),
    }

    seen["alice_signed_in"] = list(c.sign_in(page, c.cfg["alice"]))
    seen["cookie"] = cookie_of(context, page)
    seen["live"] = watch_live(c, context, page)
    load = seen["live"]["id"]
    seen["again"] = run_again(c, page, load)
    again = seen["again"]["id"]
    seen["run"] = finished_run(c, page)
    seen["capacity"] = capacity(c, page)
    seen["timeline"] = timeline(c, page)
    seen["compare"] = compare(c, page, load, again)
    seen["scenario"] = scenario_runs(c, page)
    seen["faults_compare"] = faults_runs(c, page)
    seen["finding"] = close_finding(c, page)
    seen["filters"] = filters(c, page, load)
    seen["scenarios"] = scenarios(c, page)
    seen["schedules"] = schedules(c, page)
    seen["agents"] = agents(c, page)
    seen["phone"] = phone(c, page, [f"/runs/{c.cfg['bad']}", f"/runs/{load}", f"/runs/{c.cfg['capacity']}",
                                    f"/runs/{c.cfg['faults']}", f"/compare?before={load}&after={again}",
                                    f"/runs/{c.cfg['scenario_after']}",
                                    f"/compare?before={c.cfg['scenario_before']}&after={c.cfg['scenario_after']}"])

    # Signing out; then the old cookie, put back by hand, opens nothing.
    old = seen["cookie"].pop("value")
    c.goto(page, "/runs")
    c.submit(page, page.locator("form#sign-out"))
    seen["signed_out_after"] = c.goto(page, "/runs")[1]
    context.close()
    context, page = c.person()
    context.add_cookies([{"name": "iohr_session", "value": old, "url": c.cfg["url"]}])
    seen["old_cookie_after_sign_out"] = c.goto(page, "/runs")[1]
    context.close()

    context, page = c.person()
    ask("open_console")
    seen["bob_after_open"] = list(c.sign_in(page, c.cfg["bob"]))
    expect(page.locator("table#runs")).to_be_attached()
    seen["bob_runs"] = c.run_ids(page)
    c.shot(page, "runs-bob")
    # Closed again: bob's session, still live, is refused on its next page.
    ask("close_console")
    status, _ = c.goto(page, "/runs")
    seen["bob_after_close"] = [status, c.refusal(page)]
    context.close()

    seen["pages"] = c.pages
    seen["screenshots"] = c.shots
    return seen


def drive_tls(c):
    """Mode "tls": the API over https; signing in sets a Secure cookie."""
    context, page = c.person()
    seen = {"signed_in": list(c.sign_in(page, c.cfg["alice"]))}
    seen["cookie"] = cookie_of(context, page)
    seen["cookie"].pop("value")
    expect(page.locator("body")).to_have_attribute("data-page", "runs")
    c.shot(page, "runs-tls")
    context.close()
    return seen


def main():
    cfg = json.loads(sys.argv[1])
    os.makedirs(cfg["screenshots"], exist_ok=True)
    expect.set_options(timeout=STEP_MS)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True,
                                    timeout=STEP_MS)
        c = Console(cfg, browser)
        try:
            seen = drive_tls(c) if cfg.get("mode") == "tls" else drive(c)
        except Exception:
            page = c.current
            if page is not None and not page.is_closed():
                try:
                    page.screenshot(path=os.path.join(cfg["screenshots"], "failure.png"),
                                    full_page=True)
                    print(f"failed on {page.url}:\n{page.content()[:4000]}", file=sys.stderr)
                except Exception as e:  # the failure itself is what matters
                    print(f"no failure screenshot: {e}", file=sys.stderr)
            raise
        finally:
            browser.close()
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    main()
