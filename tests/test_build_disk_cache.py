"""Builds kept on disk for a machine's app processes: a setting one server built (in its own
process or in a build process) is read, not built, by another server; an unbuildable setting
stays unbuildable; a file that cannot be read is built again; the folder is bounded. Each
server gets a folder of its own (tmp_path), through its settings."""
import dataclasses
import os
import time

import pytest

from explorer.errors import ExplorerError
from explorer.presets import all_presets, get_preset
from explorer.server import build_disk
from explorer.server.build_disk import build_key
from explorer.server.builds import BuildService
from explorer.server.content_keys import package_fingerprint
from explorer.server.settings import ServerSettings

SPEC = get_preset("dw-blog-final-96").spec
WIDE = SPEC.with_knobs(num_thread_x=64, num_thread_y=32)  # 2048 threads per block: never builds


def settings(folder, workers: int = 0, **changes) -> ServerSettings:
    return ServerSettings(**{"build_workers": workers, "build_dir": str(folder), "build_disk_cache": 4096, **changes})


def service_in(folder, workers: int = 0, **changes) -> BuildService:
    return BuildService(settings(folder, workers, **changes))


def kept_files(folder) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(".pickle"))


# -- the key -----------------------------------------------------------------------------------


def test_the_key_changes_with_every_input_and_only_with_them():
    h100 = "cuda -arch=sm_90"
    key = build_key(SPEC, h100, "0.27", "source")
    assert key == build_key(get_preset("dw-blog-final-96").spec, h100, "0.27", "source")
    assert len({key, build_key(SPEC.with_knobs(num_thread_x=8), h100, "0.27", "source"),
                build_key(SPEC, "cuda -arch=sm_80", "0.27", "source"), build_key(SPEC, h100, "0.28", "source"),
                build_key(SPEC, h100, "0.27", "edited")}) == 5


def test_a_specs_repr_names_every_knob_and_workload_field():
    for preset in all_presets().values():
        text = repr(preset.spec)
        for part in (preset.spec.knobs, preset.spec.workload):
            for f in dataclasses.fields(part):
                assert f"{f.name}={getattr(part, f.name)!r}" in text


def test_an_edited_source_file_changes_the_fingerprint(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    before = package_fingerprint(tmp_path)
    assert package_fingerprint(tmp_path) == before
    (tmp_path / "sub" / "b.py").write_text("y = 3\n")
    os.utime(tmp_path / "sub" / "b.py", ns=(1, 1))  # even where the clock did not move
    assert package_fingerprint(tmp_path) != before


# -- servers sharing a folder --------------------------------------------------------------------


def test_a_build_made_by_one_server_is_read_by_another(tmp_path):
    first, second = service_in(tmp_path), service_in(tmp_path)
    built = first.build(SPEC, "auto")
    assert first.stats()["read from disk"] == 0 and len(kept_files(tmp_path)) == 1
    read = second.build(SPEC, "auto")
    assert second.built_here == 0 and second.stats()["read from disk"] == 1
    assert read is not built and read.cuda == built.cuda and read.kernels == built.kernels
    assert read.runtime_module is None and set(read.timings_ms) == {"read from disk"}
    assert second.build(SPEC, "auto") is read  # then from memory
    assert second.stats()["read from disk"] == 1


def test_an_unbuildable_setting_is_kept_unbuildable(tmp_path):
    first, second = service_in(tmp_path), service_in(tmp_path)
    with pytest.raises(ExplorerError, match="threads") as built:
        first.build(WIDE, "auto")
    with pytest.raises(ExplorerError, match="threads") as read:
        second.build(WIDE, "auto")
    assert str(read.value) == str(built.value) and type(read.value) is type(built.value)
    assert second.built_here == 0 and second.stats()["read from disk"] == 1


@pytest.mark.parametrize("content", [b"", b"\x80\x05\x95 cut short", b"not a pickle"])
def test_a_file_that_cannot_be_read_is_built_again_and_replaced(tmp_path, content):
    service_in(tmp_path).build(SPEC, "auto")
    (path,) = kept_files(tmp_path)
    (tmp_path / path).write_bytes(content)
    second = service_in(tmp_path)
    assert "__global__" in second.build(SPEC, "auto").cuda
    assert second.built_here == 1 and second.stats()["read from disk"] == 0
    third = service_in(tmp_path)
    third.build(SPEC, "auto")
    assert third.built_here == 0 and third.stats()["read from disk"] == 1


def test_a_forgotten_build_is_built_again_not_read(tmp_path):
    service = service_in(tmp_path)
    service.build(SPEC, "auto")
    service.forget()
    service.build(SPEC, "auto")
    assert service.built_here == 2 and service.stats()["read from disk"] == 0
    other = service_in(tmp_path)  # the file stays for the machine's other servers
    other.build(SPEC, "auto")
    assert other.stats()["read from disk"] == 1


def test_the_folder_keeps_the_most_recently_used_files(tmp_path):
    names = [f"{i:02d}.pickle" for i in range(20)]
    for i, name in enumerate(names):
        (tmp_path / name).write_bytes(b"x")
        os.utime(tmp_path / name, ns=(i * 10**9, i * 10**9))
    (tmp_path / "notes.txt").write_text("not a build")
    build_disk.prune(str(tmp_path), 20)
    assert len(kept_files(tmp_path)) == 20  # not over the bound
    build_disk.prune(str(tmp_path), 10)
    assert kept_files(tmp_path) == names[11:] and (tmp_path / "notes.txt").exists()  # 90 % of 10: the 9 newest


def test_a_server_bounds_the_folder_as_it_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(build_disk, "PRUNE_EVERY", 1)
    service = service_in(tmp_path, build_disk_cache=2)
    for x in (4, 8, 16):  # 16: SPEC, which this process has built already (explorer.build's cache)
        service.build(SPEC.with_knobs(num_thread_x=x), "auto")
        time.sleep(0.01)  # distinct modification times
    assert len(kept_files(tmp_path)) == 1  # 3 > 2: down to 90 % of 2, rounded down
    assert service.stats()["read from disk"] == 0


def test_no_folder_where_none_is_kept_or_other_users_may_write(tmp_path):
    service = service_in(tmp_path / "off", build_disk_cache=0)
    service.build(SPEC, "auto")
    assert not (tmp_path / "off").exists()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    service = service_in(shared)
    assert "__global__" in service.build(SPEC, "auto").cuda and kept_files(shared) == []


# -- the build processes -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("builds")


@pytest.fixture(scope="module")
def pooled(folder):
    service = service_in(folder, workers=1)
    yield service
    service.close()


def test_a_build_process_keeps_its_build_with_the_highlighted_views(pooled, folder):
    spec = SPEC.with_knobs(num_thread_x=4)
    built = pooled.build(spec, "auto")
    reader = service_in(folder)
    read = reader.build(spec, "auto")
    assert reader.built_here == 0 and reader.stats()["read from disk"] == 1
    assert read.cuda == built.cuda and {"tensorir", "trace"} <= set(read.views_html)


def test_a_server_with_build_processes_reads_before_it_sends(pooled, folder):
    from explorer.highlight import VIEW_LANGUAGES

    spec = SPEC.with_knobs(num_thread_x=2)
    service_in(folder).build(spec, "auto")  # kept by a server building in its own process
    deadline = time.monotonic() + 30
    while pooled._busy and time.monotonic() < deadline:  # the last test's highlighting: a free process takes it
        time.sleep(0.02)
    read = pooled.build(spec, "auto")
    assert pooled.stats()["read from disk"] == 1 and set(read.timings_ms) == {"read from disk"}
    deadline = time.monotonic() + 30
    while set(read.views_html) != set(VIEW_LANGUAGES) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert set(read.views_html) == set(VIEW_LANGUAGES)  # highlighted in the build processes, as a build is


def test_a_process_that_builds_each_setting_once_keeps_few_builds():
    import explorer.build as build_module

    before = build_module._build_cached
    try:
        build_module.keep_builds(2)
        for x in (4, 8, 16):
            build_module.build(get_preset("dw-blog-final-96").spec.with_knobs(num_thread_x=x), "auto")
        assert build_module._build_cached.cache_info().currsize == 2
        assert build_module._build_cached.cache_info().maxsize == 2
    finally:
        build_module._build_cached = before
