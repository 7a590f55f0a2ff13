"""train.py's twins (model 5): kept together in a batch, the pair loss, validation's pair check."""
from __future__ import annotations


import numpy as np
import torch

from tests.support.script_modules import load

train = load("model", "train")


def test_without_twins_the_order_is_the_recipe_before_them():
    mate = np.full(50, -1)
    assert np.array_equal(train.epoch_order(np.random.default_rng(4), mate),
                          np.random.default_rng(4).permutation(50))


def test_each_twin_follows_its_noisy_twin_view_for_view():
    clip = np.repeat(np.arange(6), 4)  # six clips of four views; clips 1/2 and 4/5 are twins
    partner = np.array([-1, 2, 1, -1, 5, 4])
    mate = train.mates(clip, partner)
    assert list(mate[4:8]) == [8, 9, 10, 11] and list(mate[8:12]) == [4, 5, 6, 7]
    assert (mate[clip == 0] == -1).all() and (mate[clip == 3] == -1).all()
    order = train.epoch_order(np.random.default_rng(1), mate)
    assert sorted(order) == list(range(24))
    for i, s in enumerate(order):
        if mate[s] > s:  # the noisy twin's view: its clean twin's same view next
            assert order[i + 1] == mate[s]


def test_pair_loss_asks_the_noisy_logit_to_stand_above_its_twin():
    logit = torch.tensor([3.0, 0.0, 1.0, 0.5])
    noisy, clean = torch.tensor([0, 2]), torch.tensor([1, 3])
    assert float(train.pair_loss(logit, noisy, clean, 2.0)) == 0.75  # (0 + 1.5) / 2
    assert float(train.pair_loss(logit, noisy[:1], clean[:1], 2.0)) == 0.0
    empty = torch.tensor([], dtype=torch.long)
    assert float(train.pair_loss(logit, empty, empty, 2.0)) == 0.0


def test_the_pair_check_counts_noisy_halves_found_and_clean_halves_flagged():
    logit = {"pair_clean": [-3.0, 2.0], "pair_noisy": [3.0, -1.0]}  # window 1 fine, window 2 swapped
    records, frames, owner = [], [], []
    for w in range(2):
        for half in ("pair_clean", "pair_noisy"):
            k = len(records)
            records.append({"spec": {"real": half}})
            out = np.zeros((8, 7), np.float32)
            out[:, train.NOISE] = logit[half][w]
            frames.append(out)
            owner.append(np.full(8, k))
    res = train.pair_check(np.concatenate(frames), {"clip": np.concatenate(owner)}, records)
    assert res["pairs_noisy_found"] == 0.5 and res["pairs_clean_flagged"] == 0.5
    assert res["pairs_ordered"] == 0.5 and res["pairs_windows"] == 2 and res["pair_check"] == 0.5
    logit["pair_noisy"] = [3.0, 3.0]  # both found: finding counts twice
    frames[3][:, train.NOISE] = 3.0
    res = train.pair_check(np.concatenate(frames), {"clip": np.concatenate(owner)}, records)
    assert res["pairs_noisy_found"] == 1.0 and abs(res["pair_check"] - 2.5 / 3) < 1e-9


def test_the_test_plan_splits_into_the_sources_as_they_are_and_the_rest():
    tt = load("model", "threshold_test")
    specs = [{"seed": 1, "ladder": ["clean", 0]}, {"seed": 2, "real": "clean"}, {"seed": 3},
             {"seed": 4, "real": "pair_noisy"}, {"seed": 4, "real": "pair_clean"}]
    real = tt.subset(specs, real_only=True)
    assert [s["seed"] for s in real] == [4, 4, 2]  # the PolyU halves first
    rest = tt.subset(specs, no_real=True)
    assert [s["seed"] for s in rest] == [1, 3]
    assert tt.subset(specs) == specs


def test_distill_loss_is_least_where_the_student_copies_the_teacher():
    teacher = torch.tensor([[2.0, -3.0, 0.0]])
    same = float(train.distill_loss(teacher.clone(), teacher))
    for other in (torch.tensor([[0.0, -3.0, 0.0]]), torch.tensor([[2.0, 3.0, 0.0]]), torch.tensor([[2.0, -3.0, 1.0]])):
        assert float(train.distill_loss(other, teacher)) > same
    # the gradient pulls each logit towards the teacher's
    student = torch.zeros(1, 3, requires_grad=True)
    train.distill_loss(student, teacher).backward()
    assert student.grad[0, 0] < 0 < student.grad[0, 1] and abs(float(student.grad[0, 2])) < 1e-7
