"""The training data's rules (scripts/): the content manifest, PolyU's split, labels, the noise target."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.support.script_modules import load

content = load("model", "content")
md = load("model", "make_dataset")
synth = load("model", "synth")
targets = load("model", "targets")


def test_the_manifest_names_every_folder_with_a_licence_and_ships_nothing():
    m = json.loads(content.MANIFEST.read_text())
    assert m["ships"] is False
    folders = {e["file"].split("/")[0] for e in m["files"]}
    assert folders == set(content.LICENCES)
    assert all(len(e["sha256"]) == 64 and e["licence"] for e in m["files"])


def test_check_finds_a_changed_a_missing_and_an_unlisted_file(tmp_path, monkeypatch):
    root = tmp_path / "content"
    (root / "set5").mkdir(parents=True)
    for name in ("a.png", "b.png"):
        (root / "set5" / name).write_bytes(name.encode())
    monkeypatch.setattr(content, "MANIFEST", tmp_path / "manifest.json")
    content.write_manifest(root)
    assert content.check(root) == []
    (root / "set5" / "a.png").write_bytes(b"changed")
    (root / "set5" / "b.png").unlink()
    (root / "set5" / "c.png").write_bytes(b"new")
    assert content.check(root) == ["missing: set5/b.png", "not in the manifest: set5/c.png",
                                   "sha256 differs: set5/a.png"]


def test_polyu_crops_share_their_scene_with_its_mean_image():
    assert content.polyu_scene("Canon80D_compr_mean") == content.polyu_scene("Canon80D_8_8_6400_comproom_3")
    assert content.polyu_scene("Nikon_800_carbi_mean").startswith("polyu/nikon8")
    assert content.polyu_scene("Canon80D_compr_mean") != content.polyu_scene("Canon80D_print_mean")


def test_the_noise_penalty_starts_at_zero_and_grows_with_the_noise():
    p = md.noise_penalty(np.array([0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0]))
    assert p[0] == 0.0 and np.all(np.diff(p) > 0) and p[-1] < md.NOISE_PENALTY_MAX


def test_noise_sigma_measures_what_was_added_and_nothing_else():
    rng = np.random.default_rng(0)
    clean = rng.integers(40, 200, (3, 64, 64, 3)).astype(np.uint8)
    assert np.all(synth.noise_sigma(clean, clean) == 0)
    noisy = np.clip(clean + rng.normal(0, 6, clean.shape), 0, 255).astype(np.uint8)
    got = synth.noise_sigma(noisy, clean)
    assert np.all((got > 3) & (got < 7))  # luma mixes the channels' independent noise down
    assert np.all(synth.noise_sigma(np.clip(clean.astype(int) + 9, 0, 255).astype(np.uint8), clean) < 0.5)


def x_of(luma: float) -> np.ndarray:
    return np.full((2, 32, 32, 3), luma, np.uint8)


@pytest.mark.parametrize("spec, luma, expected", [
    ({"night": 2.2}, 30, {"dark": 0, "overexposed": 0}),  # a night scene as shot is clean
    ({"night": 0.5}, 215, {"dark": 0, "overexposed": 0}),  # snow, sky, a white page too
    ({"exposure": [0.3, 1.4]}, 30, {"dark": 1}),
    ({"exposure": [2.5, 0.8]}, 220, {"overexposed": 1}),
    ({"shake": [20.0, 0.8, 0.0]}, 120, {"blur": 1}),
    ({"focus": [6.0, 0]}, 120, {"blur": 1}),
    ({"focus": [1.0, 0]}, 120, {"blur": -1}),
    ({"smear": [40.0, 3.0]}, 120, {"blur": -1, "noise": 0}),
])
def test_labels_follow_what_was_applied(spec, luma, expected):
    labels = dict(zip(("blur", "noise", "compression", "low_resolution", "dark", "overexposed"),
                      md.defect_labels(spec, x_of(luma), vmaf_codec=95.0, sigma_eff=0.0)))
    assert {k: labels[k] for k in expected} == expected


@pytest.mark.parametrize("sigma_eff, expected", [(0.5, 0), (1.5, -1), (3.0, 1)])
def test_real_noise_is_labelled_by_what_survived_the_codec(sigma_eff, expected):
    noisy = md.defect_labels({"pair": True}, x_of(120), vmaf_codec=95.0, sigma_eff=sigma_eff)
    assert noisy[1] == expected
    clean_half = md.defect_labels({"pair": True, "pair_clean": True}, x_of(120), vmaf_codec=95.0, sigma_eff=0.0)
    assert clean_half[1] == 0


def test_camera_shake_moves_by_whole_pixels_within_its_amplitude():
    path = synth.shake_path(8, 5.0, np.random.default_rng(1))
    assert path.shape == (8, 2) and np.all(path == np.round(path)) and np.abs(path).max() <= 5.0
    frames = np.random.default_rng(2).integers(0, 256, (2, 40, 40, 3)).astype(np.uint8)
    moved = synth.translate(frames, np.array([[0, 0], [3, -2]]))
    assert np.array_equal(moved[0], frames[0])
    assert np.array_equal(moved[1][5:30, 8:35], frames[1][7:32, 5:32])


def test_defocus_keeps_brightness_and_softens_edges():
    frame = np.zeros((1, 40, 40, 3), np.uint8)
    frame[:, :, 20:] = 200
    out = synth.defocus(frame, [4.0])
    assert abs(float(out.mean()) - float(frame.mean())) < 1.0
    assert 0 < out[0, 20, 18, 0] < 200


def test_bands_and_the_viewers_vmaf():
    assert [targets.band(v) for v in (95, 90, 75, 55, 35, 10)] == [0, 0, 1, 2, 3, 4]
    dark = {"vmaf": 96.0, "target": 96.0, "vmaf_pristine": 12.0}
    noisy = {"vmaf": 97.0, "target": 85.0}
    assert targets.viewer_vmaf(dark) == 12.0 and targets.viewer_vmaf(noisy) == 85.0


def test_model_4_mix_is_a_distribution_with_twice_the_clean_share():
    share = dict(md.TRAIN_KINDS)
    assert abs(sum(share.values()) - 1) < 1e-9 and abs(sum(dict(md.KINDS).values()) - 1) < 1e-9
    clean = share["clean"] + share["texture"] + share["pairclean"]
    assert clean >= 2 * dict(md.KINDS)["clean"]


def test_texture_ranks_fine_detail_over_smooth_pictures(tmp_path):
    import cv2
    rng = np.random.default_rng(0)
    smooth = np.tile(np.linspace(0, 255, 300, dtype=np.uint8), (200, 1))
    fine = rng.integers(0, 255, (200, 300)).astype(np.uint8)
    assert md.texture(fine) > 10 * md.texture(smooth)
    sources = []
    for name, im in (("smooth", smooth), ("fine", fine), ("soft", cv2.GaussianBlur(fine, (0, 0), 3))):
        cv2.imwrite(str(tmp_path / f"{name}.png"), im)
        sources.append({"kind": "still", "file": f"{name}.png"})
    sources.append({"kind": "pair", "file": "fine.png"})  # pairs are never drawn as texture
    assert md.textured(tmp_path, sources, share=1 / 3) == [1]


def test_texture_and_pair_clean_clips_are_clean_negatives_and_other_splits_keep_the_old_mix():
    sizes = [(800, 600, "still"), (640, 480, "still"), (512, 512, "pair")]
    rng = np.random.default_rng(5)
    drawn = [md.draw_spec(rng, sizes, i, kinds=md.TRAIN_KINDS, fine=[1]) for i in range(400)]
    texture = [s for s in drawn if s.get("drawn") == "texture"]
    pairs = [s for s in drawn if s.get("drawn") == "pairclean"]
    assert texture and pairs
    assert all(s["kind"] == "clean" and s["source"] == 1 for s in texture)
    assert all(s["kind"] == "clean" and s["pair"] and s["pair_clean"] for s in pairs)
    x = np.full((4, 32, 32, 3), 120, np.uint8)
    for s in texture + pairs:
        assert md.defect_labels(s, x, vmaf_codec=95.0, sigma_eff=0.0) == [0, 0, 0, 0, 0, 0]



def test_the_default_mix_draws_what_model_3_was_trained_validated_and_tested_on():
    # Validation, calibration and test plans use draw_spec's default mix: model 4 must be judged
    # on the clips model 3 was. The digest is of model 3's code's draws (commit 87fc96f).
    import hashlib
    sizes = [(800, 600, "still"), (640, 480, "still"), (512, 512, "pair"), (1280, 720, "clip")]
    rng = np.random.default_rng(9)
    specs = [md.draw_spec(rng, sizes, i) for i in range(300)]

    def r(v):
        return round(v, 4) if isinstance(v, float) else [r(x) for x in v] if isinstance(v, list) else v
    text = json.dumps([{k: r(v) for k, v in s.items()} for s in specs], sort_keys=True)
    assert hashlib.sha256(text.encode()).hexdigest() == \
        "6b219576b9d996f353166c1b848e3ef7d0fd96e95c71f86a25720b952e0dfe3d"


def test_model_5_mix_pairs_every_polyu_clean_half_with_its_noisy_half_and_doubles_real_noise():
    share = dict(md.TRAIN_KINDS_V5)
    assert abs(sum(share.values()) - 1) < 1e-9
    assert "pairclean" not in share and share["pairboth"] > 0
    assert share["realnoise"] >= 1.5 * dict(md.TRAIN_KINDS)["realnoise"]


def test_twins_are_one_crop_made_clean_and_noisy_one_after_the_other():
    sizes = [(800, 600, "still"), (512, 512, "pair"), (512, 512, "pair")]
    rng = np.random.default_rng(3)
    specs = md.twins([md.draw_spec(rng, sizes, i, kinds=md.TRAIN_KINDS_V5, fine=[0]) for i in range(300)])
    mate = md.partners(specs)
    noisy = [i for i, s in enumerate(specs) if s.get("twin") == "noisy"]
    assert noisy and (mate >= 0).sum() == 2 * len(noisy)
    for i in noisy:
        a, b = specs[i], specs[i + 1]
        assert mate[i] == i + 1 and mate[i + 1] == i
        assert a["kind"] == "realnoise" and not a.get("pair_clean")
        assert b["kind"] == "clean" and b["pair_clean"] and b["drawn"] == "pairclean"
        same = ("seed", "source", "width", "height", "codec", "quality", "fps", "frames")
        assert all(a[k] == b[k] for k in same)  # one window, one codec: only the noise differs
        x = np.full((4, 32, 32, 3), 120, np.uint8)
        assert md.defect_labels(b, x, vmaf_codec=95.0, sigma_eff=0.0)[1] == 0
        assert md.defect_labels(a, x, vmaf_codec=95.0, sigma_eff=3.0)[1] == 1
    assert all(m == -1 for i, m in enumerate(mate) if i not in noisy and i - 1 not in noisy)
    plain = [md.draw_spec(rng, sizes, i) for i in range(50)]  # the default mix has no twins
    assert md.twins(plain) == plain and (md.partners(plain) == -1).all()


def test_pairs_set_aside_for_validation_are_never_drawn_for_training(tmp_path):
    import cv2
    cv2.imwrite(str(tmp_path / "a.png"), np.random.default_rng(0).integers(0, 255, (300, 400, 3)).astype(np.uint8))
    held = md.VAL_PAIRS[0] + "1"
    pair = {"split": "train", "kind": "pair", "width": 512, "height": 512}
    entries = [{"id": "still/a", "split": "train", "kind": "still", "file": "a.png", "width": 400, "height": 300},
               {**pair, "id": "polyu_pairs/Other_1", "file": "p.jpg"}, {**pair, "id": held, "file": "h.jpg"}]
    (tmp_path / "content.json").write_text(json.dumps(entries))
    specs = md.plan_split(tmp_path, "train", 400, 7, kinds=md.TRAIN_KINDS_V5, hold=md.VAL_PAIRS)
    assert any(s.get("pair") for s in specs)
    assert all(s["source"] != 2 for s in specs) and all(s.get("real_noise", [0])[0] != 2 for s in specs)
    ids = [e["id"] for e in entries]
    check = md.pair_check_specs([(e["width"], e["height"], e["kind"]) for e in entries], ids, 9)
    assert len(check) == 2 * md.PAIR_CHECK_WINDOWS and {s["source"] for s in check} == {2}
    for clean, noisy in zip(check[::2], check[1::2]):
        assert (clean["real"], noisy["real"]) == ("pair_clean", "pair_noisy") and clean["seed"] == noisy["seed"]


def test_smearing_at_the_working_scale_wipes_what_the_view_sees_and_keeps_finer_texture():
    import cv2
    rng = np.random.default_rng(4)
    coarse = cv2.resize(rng.integers(0, 255, (64, 64, 3)).astype(np.uint8), (256, 256), interpolation=cv2.INTER_CUBIC)
    frames = np.stack([np.clip(coarse + rng.normal(0, 6, coarse.shape), 0, 255).astype(np.uint8)] * 2)
    assert np.array_equal(synth.smear_working(frames, 40, 3, 1.0), synth.smear(frames, 40, 3))  # at scale 1: smear
    out = synth.smear_working(frames, 40, 3, 0.25)
    assert out.shape == frames.shape and out.dtype == np.uint8

    def small(x):
        return cv2.resize(x, (64, 64), interpolation=cv2.INTER_AREA).astype(np.float32)

    want = cv2.bilateralFilter(small(frames[0]).astype(np.uint8), 0, 40, 3).astype(np.float32)
    assert np.abs(small(out[0]) - want).mean() < 0.5  # at the working scale: the filter's own result
    assert np.abs(small(out[0]) - small(frames[0])).mean() > 3  # and it did change the picture there
    fine = frames[0].astype(np.float32) - cv2.resize(small(frames[0]), (256, 256), interpolation=cv2.INTER_LINEAR)
    kept = out[0].astype(np.float32) - cv2.resize(small(out[0]), (256, 256), interpolation=cv2.INTER_LINEAR)
    assert np.corrcoef(fine.ravel(), kept.ravel())[0, 1] > 0.9  # texture finer than the working scale stays


def test_model_6_sets_a_whole_camera_aside_and_smears_training_clips_at_the_working_scale(tmp_path):
    import cv2
    cv2.imwrite(str(tmp_path / "a.png"), np.random.default_rng(0).integers(0, 255, (300, 400, 3)).astype(np.uint8))
    pair = {"split": "train", "kind": "pair", "width": 512, "height": 512, "file": "p.jpg"}
    entries = [{"id": "still/a", "split": "train", "kind": "still", "file": "a.png", "width": 400, "height": 300},
               {**pair, "id": "polyu_pairs/Sony_x_1"}, {**pair, "id": md.VAL_PAIRS_V6[0] + "5_200_3200_toy_1"},
               {**pair, "id": md.VAL_PAIRS_V6[0] + "5_200_3200_toy_2"}]
    (tmp_path / "content.json").write_text(json.dumps(entries))
    specs = md.plan_split(tmp_path, "train", 400, 7, kinds=md.TRAIN_KINDS_V5, hold=md.VAL_PAIRS_V6,
                          smear_scale="working")
    drawn = {s["source"] for s in specs} | {s["real_noise"][0] for s in specs if "real_noise" in s}
    assert 1 in drawn and not drawn & {2, 3}
    smeared = [s for s in specs if "smear" in s]
    assert smeared and all(s["smear_scale"] == "working" for s in smeared)
    assert not any("smear_scale" in s for s in md.plan_split(tmp_path, "train", 100, 7, kinds=md.TRAIN_KINDS_V5))
    check = md.pair_check_specs([(e["width"], e["height"], e["kind"]) for e in entries], [e["id"] for e in entries],
                                9, held=md.VAL_PAIRS_V6)
    assert {s["source"] for s in check} == {2, 3} and len(check) == 2 * 2 * md.PAIR_CHECK_WINDOWS


@pytest.mark.parametrize("spec, luma, expected", [
    ({"low_light": True}, 80, 1),  # a low-light scene as shot, whatever its lamps do to the mean
    ({"low_light": True, "exposure": [2.0, 0.8]}, 150, -1),  # brightened: not for the head
    ({"night": 2.2}, 40, 1),  # a night tone that leaves the picture dim
    ({"night": 2.2}, 75, -1),
    ({"night": 1.8}, 120, 0),  # a night tone on a bright scene that stays bright
    ({}, 40, -1),  # an ordinary dim picture: the score's own luma rule decides
    ({}, 120, 0),
    ({"exposure": [0.3, 1.4]}, 40, 1),
    ({"exposure": [0.6, 1.0]}, 100, 0),
])
def test_mix_v7_labels_dark_as_a_viewer_sees_it(spec, luma, expected):
    labels = md.defect_labels({**spec, "dark_rule": "seen"}, x_of(luma), vmaf_codec=95.0, sigma_eff=0.0)
    assert labels[4] == expected
    if "low_light" in spec or "night" in spec:  # models 3 to 6 learned these as not dark
        assert md.defect_labels(spec, x_of(luma), vmaf_codec=95.0, sigma_eff=0.0)[4] in (0, -1)


def test_mix_v7_draws_low_light_scenes_as_shot_and_marks_them_in_every_split(tmp_path):
    import cv2
    for name in ("a", "b"):
        cv2.imwrite(str(tmp_path / f"{name}.png"), np.full((300, 400, 3), 60, np.uint8))
    still = {"split": "train", "kind": "still", "width": 400, "height": 300}
    entries = [{**still, "id": "lowlight_zerodce/LIME_1", "file": "a.png"},  # a low-light scene
               {**still, "id": "lowlight_zerodce/DICM_01", "file": "b.png"},  # a daylight photo of the folder
               {**still, "id": "other/c", "file": "b.png"}]
    (tmp_path / "content.json").write_text(json.dumps(entries))
    specs = md.plan_split(tmp_path, "train", 600, 3, kinds=md.TRAIN_KINDS_V7, dark_rule="seen")
    drawn = [s for s in specs if s.get("drawn") == "lowlight"]
    assert drawn and all(s["source"] == 0 and s["kind"] == "clean" and "night" not in s for s in drawn)
    assert all(s["dark_rule"] == "seen" for s in specs)
    assert all(s.get("low_light", False) == (s["source"] == 0) for s in specs)
    old = md.plan_split(tmp_path, "train", 600, 3)
    assert not any("dark_rule" in s or "low_light" in s or s.get("drawn") == "lowlight" for s in old)
