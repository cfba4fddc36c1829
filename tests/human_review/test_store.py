"""ReviewStore on SQLite and PostgreSQL: the store id, and stores made before ids and unique ratings."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from transferlab.human_review.store import RatingChangeRow, RatingRow, ReviewStore, StoreMetaRow, utcnow


def _reopen(store: ReviewStore) -> ReviewStore:
    return ReviewStore(store.url)


def test_the_store_id_is_written_once_and_read_back(store: ReviewStore) -> None:
    with store.session() as s:
        rows = s.execute(sa.select(StoreMetaRow.key, StoreMetaRow.value)).all()
    assert rows == [("store_id", store.store_id)]
    again = _reopen(store)
    assert again.store_id == store.store_id
    again.dispose()


def test_an_older_store_gets_an_id_and_keeps_each_raters_newest_rating(store: ReviewStore) -> None:
    """A store made before store ids and the one-rating-per-rater rule: no id, duplicate ratings."""
    t0 = utcnow()
    with store.engine.begin() as connection:
        connection.exec_driver_sql("DROP INDEX uq_ratings_rater_subject")
        connection.execute(sa.delete(StoreMetaRow))
        for score, rater in ((3.0, "rita"), (5.0, "rob"), (7.0, "rita"), (9.0, "rita")):
            connection.execute(
                sa.insert(RatingRow).values(
                    subject="report-1", score=score, rater=rater, comment=str(score), at=t0
                )
            )
    old_id = store.store_id
    upgraded = _reopen(store)
    assert upgraded.store_id != old_id and len(upgraded.store_id) == 16  # a new random id, stored
    with upgraded.session() as s:
        kept = s.execute(sa.select(RatingRow.rater, RatingRow.score).order_by(RatingRow.rater)).all()
        changes = s.execute(
            sa.select(RatingChangeRow.old_score, RatingChangeRow.new_score).order_by(RatingChangeRow.id)
        ).all()
    assert kept == [("rita", 9.0), ("rob", 5.0)]
    assert changes == [(3.0, 7.0), (7.0, 9.0)]
    with pytest.raises(sa.exc.IntegrityError), upgraded.session() as s:  # one rating per rater from now on
        s.add(RatingRow(subject="report-1", score=1.0, rater="rob", comment="", at=t0))
    assert _reopen(upgraded).store_id == upgraded.store_id
    upgraded.dispose()


def test_store_doctests_hold() -> None:
    import doctest

    from transferlab.human_review import store as module

    assert doctest.testmod(module).failed == 0
