"""hvd.common.util: Horovod's version helper (horovod.common.util)."""
import re


def _release(version):
    """The leading numbers of a version string: '2.15.1-tf' -> (2, 15, 1)."""
    parts = []
    for piece in re.split(r'[.+-]', version):
        m = re.match(r'\d+', piece)
        if not m:
            break
        parts.append(int(m.group()))
        if m.end() != len(piece):
            break
    return tuple(parts)


def is_version_greater_equal_than(ver, target):
    """Whether version string ver is at least target, comparing their
    release numbers ('2.15.1' >= '2.6.0'; missing parts count as 0)."""
    if not isinstance(ver, str) or not isinstance(target, str):
        raise ValueError('is_version_greater_equal_than takes two version strings, not %r and %r' % (ver, target))
    a, b = _release(ver), _release(target)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))
