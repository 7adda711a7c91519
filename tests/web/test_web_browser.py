"""The pages in a real headless browser: Debian's Chromium driven by Playwright for Python.

Without Playwright or Chromium these tests are skipped with the reason, except in CI
(``CI`` set), where a skip would hide that the pages were never run: there they fail.
Set ``SESS_WEB_SCREENSHOTS=DIR`` to keep the screenshots they take (docs/img holds them).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from forest_kit import TOKEN, serve

from sesstree import Store

CHROMIUM = os.environ.get("SESS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def _need_browser() -> None:
    reason = ""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        reason = "Playwright is not installed: pip install -e '.[web-test]'"
    if not reason and not os.path.exists(CHROMIUM):
        reason = f"no Chromium at {CHROMIUM}: apt-get install -y chromium"
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"the browser tests must run in CI: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module."""
    _need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser tab (its own cookies), failing the test on any script error."""
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    tab = context.new_page()
    tab.set_default_timeout(10_000)
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    # A refused request (the test's own) is logged as a console error; script errors are not.
    tab.on("console", lambda m: errors.append(m.text)
           if m.type == "error" and not m.text.startswith("Failed to load resource") else None)
    try:
        yield tab
    finally:
        context.close()
    assert errors == [], errors


def _shot(tab: Any, name: str, tmp_path: Path) -> None:
    """Screenshot the page; also into $SESS_WEB_SCREENSHOTS when set (how docs/img is made)."""
    tab.screenshot(path=str(tmp_path / name), full_page=True)
    folder = os.environ.get("SESS_WEB_SCREENSHOTS")
    if folder:
        shutil.copy(tmp_path / name, Path(folder) / name)
    assert (tmp_path / name).stat().st_size > 1000


def test_click_from_the_forest_to_a_session_a_node_a_diff_and_a_search(
        page: Any, forest_store: Store, tmp_path: Path) -> None:
    with serve(forest_store) as url:
        page.goto(url + "/")
        assert page.locator(".row").count() == 7
        assert page.locator(".row.is-fork").count() == 2
        assert page.locator(".row .badge.session").all_inner_texts() == [
            "scratch", "notes", "quest-2", "quest-1"]
        _shot(page, "forest.png", tmp_path)
        page.click(".row .badge.session >> text=quest-1")
        page.wait_for_url(url + "/session/quest-1")
        call = page.locator("details.call").first
        assert not call.locator("pre").first.is_visible()
        call.locator("summary").click()
        assert "missing symbol" in call.inner_text()
        _shot(page, "session.png", tmp_path)
        head = forest_store.session_head("quest-1")
        assert head is not None
        page.click(f"#n-{head} .perma")
        page.wait_for_url(url + f"/node/{head}")
        assert '"kind": "done"' in page.locator("#json").inner_text()
        page.click("text=" + forest_store.resolve("quest-1~1"))
        assert page.url == url + "/node/" + forest_store.resolve("quest-1~1")
        page.goto(url + "/diff")
        page.fill("input[name=a]", "quest-1")
        page.fill("input[name=b]", "quest-2")
        page.click("main button")
        assert forest_store.resolve("before-answer")[:12] in page.locator("#base").inner_text()
        assert page.locator(".diff section").count() == 2
        _shot(page, "diff.png", tmp_path)
        page.fill(".quick input", "frobnicate")
        page.press(".quick input", "Enter")
        page.wait_for_selector("#hits")
        assert page.locator("#hits li").count() == 2
        assert page.locator("#searched").inner_text().startswith("2 hits")
        # The tool result two sessions share is one hit naming both.
        shared = page.locator("#hits li", has_text="tool/result")
        assert shared.locator("a.session").count() == 2
        _shot(page, "search.png", tmp_path)
        page.goto(url + "/reflog/quest-2")
        page.click("td a.mono >> nth=0")
        assert "/session/quest-2?end=" in page.url


def test_a_hostile_message_runs_nothing(page: Any, forest_store: Store, tmp_path: Path) -> None:
    with serve(forest_store) as url:
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(url + "/session/notes")
        text = page.locator(".r-user").last.inner_text()
        assert "<script>window.__pwned = 1</script>" in text
        assert 'onerror="window.__pwned = 2"' in text
        assert page.locator(".conversation img, .conversation script").count() == 0
        page.click(".r-user >> nth=-1 >> .md")
        page.wait_for_timeout(300)
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert dialogs == []
        # The page's own script did run (so the check above could have seen a payload run).
        assert page.evaluate("document.body.dataset.page") == "session"
        assert page.evaluate("typeof fetch") == "function"
        _shot(page, "hostile.png", tmp_path)


def test_live_appends_appear_without_a_reload(page: Any, forest_store: Store, tmp_path: Path) -> None:
    with serve(forest_store) as url:
        page.goto(url + "/session/quest-1")
        page.evaluate("window.__same_page = true")
        node = forest_store.session("quest-1").add_message(
            {"role": "assistant", "content": "A *live* answer."})
        page.wait_for_selector(f"#n-{node.id}", timeout=10_000)
        assert "A live answer." in page.locator(f"#n-{node.id}").inner_text()
        assert page.evaluate("window.__same_page") is True, "the page was not reloaded"
        page.goto(url + "/")
        page.evaluate("window.__same_page = true")
        forest_store.fork("brand-new", "quest-1~4")
        page.wait_for_selector(".badge.session >> text=brand-new", timeout=10_000)
        assert page.evaluate("window.__same_page") is True
        page.goto(url + "/session/scratch")
        forest_store.delete_session("scratch")
        page.wait_for_selector("#live-note >> text=renamed or deleted", timeout=10_000)


def test_writes_need_the_token(page: Any, forest_store: Store, tmp_path: Path) -> None:
    with serve(forest_store, token=TOKEN) as url:
        page.goto(url + "/session/quest-1")
        assert page.locator("form[action='/actions/rename']").count() == 0
        status = page.evaluate("""async () => (await fetch('/api/v1/web/delete', {method: 'POST',
            headers: {'content-type': 'application/json'},
            body: JSON.stringify({session: 'quest-1'})})).status""")
        assert status == 401 and forest_store.has_session("quest-1")
        page.click("text=log in to write")
        page.fill("input[name=token]", "not-the-token")
        page.click("main button")
        assert "not the server's token" in page.locator("#error").inner_text()
        page.fill("input[name=token]", TOKEN)
        page.click("main button")
        page.wait_for_url(url + "/session/quest-1")
        page.click("summary >> text=rename")
        page.fill("input[name=new]", "quest-renamed")
        page.click("form[action='/actions/rename'] button")
        page.wait_for_url(url + "/session/quest-renamed")
        assert forest_store.has_session("quest-renamed") and not forest_store.has_session("quest-1")


async def _cookie_setter(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Another program on 127.0.0.1 (another port) that sets the web view's cookie name to
    non-ASCII text, by header and by script: cookies are shared by every port of a host."""
    if scope["type"] != "http":
        return
    body = ("<!doctype html><title>other</title><script>"
            "document.cookie = 'sesstree_web=\u00e9\u00e9\u00e9; path=/';</script>set").encode()
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"set-cookie", "sesstree_web=\u00e9t\u00e9\u2603; Path=/".encode())]})
    await send({"type": "http.response.body", "body": body})


def test_a_cookie_set_by_another_port_breaks_nothing(page: Any, forest_store: Store) -> None:
    with serve(forest_store, token=TOKEN) as url, serve(forest_store, app=_cookie_setter) as other:
        page.goto(other + "/")
        assert "sesstree_web=\u00e9" in page.evaluate("document.cookie")
        for path in ("/", "/session/quest-1", "/login"):
            response = page.goto(url + path)
            assert response.status == 200, path
            assert page.locator("a", has_text="log in to write").count() == 1
        # The browser did send the foreign cookie to the web view (it is not HttpOnly, so the
        # page can see it), and logging in replaces it and works.
        assert "sesstree_web=\u00e9" in page.evaluate("document.cookie")
        page.fill("input[name=token]", TOKEN)
        page.click("main button")
        page.wait_for_url(url + "/")
        assert page.locator("a", has_text="log in to write").count() == 0


def test_a_streamed_session_and_a_diff_read_folded(page: Any, tmp_path: Path) -> None:
    """A session streamed as chunks shows its prompts, answers and one row per turn, a page
    of it opens on a prompt, "every event" unfolds it; the diff of the quest's fork folds
    each side; a search snippet reads as the message does."""
    from reading_kit import quest, streamed

    from sesstree import open_store

    streamed(tmp_path / "chat", turns=4)
    with open_store(tmp_path / "chat") as store, serve(store) as url:
        page.goto(url + "/session/chat?limit=60")  # the newest 60 events begin mid-turn
        first = page.locator("#conversation .item").first
        assert "r-user" in (first.get_attribute("class") or "")
        assert "another way in" in first.inner_text()
        assert page.locator("#older").is_visible()
        assert page.locator("#conversation .k-turn").count() >= 1
        assert page.locator("#conversation .type >> text=assistant/chunk").count() == 0
        assert "stored " in page.locator("#conversation .time").first.inner_text()
        _shot(page, "session-folded.png", tmp_path)
        page.goto(url + "/session/chat")
        turns = page.locator("#conversation .k-turn .note-text").all_inner_texts()
        assert len(turns) == 4 and all(t.startswith("turn: answer (stop)") for t in turns)
        page.click("#unfold")
        assert "all-events=1" in page.url
        assert page.locator("#conversation .type >> text=assistant/chunk").count() >= 60
        assert page.locator("#conversation .note-text >> text=turn started (user)").count() == 4
        page.click("#fold")
        assert page.locator("#conversation .type >> text=assistant/chunk").count() == 0
    with open_store(quest(tmp_path)) as store, serve(store) as url:
        page.goto(url + "/diff?a=quest-1&b=quest-2")
        sides = page.locator(".diff section")
        assert sides.count() == 2
        for i in range(2):
            assert sides.nth(i).locator(".k-turn").count() == 1
            assert sides.nth(i).locator(".type >> text=usage").count() == 0
        _shot(page, "diff-folded.png", tmp_path)
        page.goto(url + "/search?q=key")
        texts = page.locator("#hits .hit-text").all_inner_texts()
        assert "Suppose the key doesn't fit. Is there another way in?" in texts
        assert not any(t.endswith("…") for t in texts if "Suppose" in t)
        _shot(page, "search-snippets.png", tmp_path)


def test_a_live_turn_shown_unfinished_is_replaced_by_its_row(
        page: Any, forest_store: Store, tmp_path: Path) -> None:
    s = forest_store.session("quest-1")
    start = s.append("turn/start", {"trigger": {"kind": "user"}})
    s.add_message({"role": "user", "content": "And the cache?"})
    with serve(forest_store) as url:
        page.goto(url + "/session/quest-1")
        row = page.locator(f"#conversation .item[data-turn='{start.id}']")
        assert row.count() == 1 and "turn: unfinished" in row.inner_text()
        s.append("step/start", {"step": 1})
        s.append("assistant/chunk", {"content": "Clea"})
        answer = s.add_message({"role": "assistant", "content": "Clean it."})
        s.append("step/end", {"step": 1, "finish_reason": "stop"})
        end = s.append("turn/end", {"reason": {"kind": "answer"}})
        page.wait_for_selector(f"#n-{end.id}", timeout=10_000)
        assert row.count() == 1 and "turn: answer (stop), 1 step" in row.inner_text()
        assert page.locator(f"#n-{start.id}").count() == 0  # the unfinished row is gone
        assert page.locator(f"#n-{answer.id}").count() == 1
        assert page.locator("#conversation .type >> text=assistant/chunk").count() == 0
        _shot(page, "session-live-turn.png", tmp_path)


def _agent_turn(store: Store, name: str, prompt: str, answer: str) -> None:
    s = store.session(name)
    s.append("turn/start", {"trigger": {"kind": "user"}})
    s.add_message({"role": "user", "content": prompt})
    s.append("step/start", {"step": 1})
    s.add_message({"role": "assistant", "content": answer})
    s.append("step/end", {"step": 1, "finish_reason": "stop"})
    s.append("turn/end", {"reason": {"kind": "answer"}, "steps": 1})


def test_forks_are_drawn_where_sessions_part_and_marked_on_the_session_page(
        page: Any, tmp_path: Path) -> None:
    from sesstree import open_store

    with open_store(tmp_path / "store") as store:
        _agent_turn(store, "chat", "Hello there.", "Hi! How can I help?")
        _agent_turn(store, "weather", "Will it rain today?", "No, clear skies.")
        _agent_turn(store, "quest-1", "Find the Silver Key.", "The mayor has it.")
        end = store.session_head("quest-1")
        assert end is not None
        _agent_turn(store, "quest-1", "Ask the mayor.", "He wants a favour.")
        store.fork("trunk", "quest-1~3")  # a head on quest-1's trunk
        store.fork("quest-2", "quest-1~6")
        _agent_turn(store, "quest-2", "Look under the mat instead.", "Found it!")
        with serve(store) as url:
            page.goto(url + "/")
            # Three trees (chat, weather and the quest) though all begin with one turn/start.
            assert page.locator(".row.separate").count() == 2
            assert page.locator(".row .meta >> text=root").count() == 3
            # The quest forks at the end of its first turn, and trunk sits on quest-1's line.
            forks = page.locator(".row.is-fork")
            assert forks.count() == 1 and forks.get_attribute("id") == f"n-{end[:12]}"
            lanes = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll(
                '.row.is-head')].map(r => [r.querySelector('.badge.session').textContent,
                r.querySelector('circle').getAttribute('cx')]))""")
            assert lanes["trunk"] == lanes["quest-1"] != lanes["quest-2"]
            _shot(page, "forest-forks.png", tmp_path)
            page.goto(url + "/session/quest-2")
            mark = page.locator("#fork-mark")
            assert mark.count() == 1
            assert "forked from quest-1 at " + end[:12] in mark.inner_text()
            # The mark sits right after the last event the two share.
            before = page.evaluate(
                "() => document.getElementById('fork-mark').previousElementSibling.dataset.id")
            assert before == end
            assert "forked from quest-1" in page.locator("#forked").inner_text()
            _shot(page, "session-fork.png", tmp_path)
            mark.locator("a >> text=quest-1").click()
            page.wait_for_url(url + f"/session/quest-1?end={end}#n-{end}")
            assert page.locator("#fork-mark").count() == 0  # quest-1 forked from nothing
            page.goto(url + "/session/chat")
            assert page.locator("#fork-mark, #forked").count() == 0


def test_the_live_tail_when_two_turns_end_between_polls_and_unfolded(
        page: Any, forest_store: Store, tmp_path: Path) -> None:
    from forest_kit import HOSTILE

    def turn(prompt: str) -> tuple[str, str]:
        start = s.append("turn/start", {"trigger": {"kind": "user"}})
        s.add_message({"role": "user", "content": prompt})
        s.append("step/start", {"step": 1})
        s.append("assistant/chunk", {"content": "…"})
        s.add_message({"role": "assistant", "content": f"{prompt}: done"})
        s.append("step/end", {"step": 1, "finish_reason": "stop"})
        return start.id, s.append("turn/end", {"reason": {"kind": "answer"}}).id

    s = forest_store.session("quest-1")
    open_start = s.append("turn/start", {"trigger": {"kind": "user"}})
    s.add_message({"role": "user", "content": "first"})
    with serve(forest_store) as url:
        page.goto(url + "/session/quest-1")  # opened mid-turn
        page.evaluate("window.__same_page = true")
        with forest_store.batch():  # that turn ends, and two more start and end, in one poll
            s.append("turn/end", {"reason": {"kind": "answer"}})
            second, third = turn("second"), turn(HOSTILE)
        page.wait_for_selector(f"#n-{third[1]}", timeout=10_000)
        rows = page.locator("#conversation .item[data-turn]")
        turns = [rows.nth(i).get_attribute("data-turn") for i in range(rows.count())]
        # One row each, in order, the unfinished one replaced (the store's older turns above).
        assert turns[-3:] == [open_start.id, second[0], third[0]] and len(set(turns)) == len(turns)
        assert "turn: unfinished" not in page.locator("#conversation").inner_text()
        assert page.locator(".conversation img, .conversation script").count() == 0
        assert HOSTILE.split(" and ")[0] in page.locator("#conversation").inner_text()
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.evaluate("window.__same_page") is True
        # Unfolded, a turn that ends adds its events and no row of its own.
        page.goto(url + "/session/quest-1?all-events=1")
        fourth = turn("fourth")
        page.wait_for_selector(f"#n-{fourth[1]}", timeout=10_000)
        assert page.locator("#conversation .item[data-turn]").count() == 0
        assert page.locator(f"#n-{fourth[0]}").count() == 1
        assert page.locator("#conversation .type >> text=assistant/chunk").count() >= 1
        # A search for the hostile text shows it as text, marked, and runs nothing.
        page.goto(url + "/search?q=onerror")
        hit = page.locator("#hits li .hit-text").first
        assert 'onerror="window.__pwned = 2"' in hit.inner_text()
        assert page.locator("#hits mark").first.inner_text() == "onerror"
        assert page.locator("#hits img, #hits script").count() == 0
        assert page.evaluate("typeof window.__pwned") == "undefined"
