"""Hand-built trees from GPUTreeShap's fixtures, as dense arrays (cl, cr, ft, th, val, cov), shared by the tests."""
import numpy as np


def basic_tree():
    """GPUTreeShap's BasicPaths tree: 0:[f0] 1:leaf -1, 2:[f1] 3:leaf -1, 4:[f2] 5:leaf 1, 6:leaf 0.5."""
    cl = np.array([[1, -1, 3, -1, 5, -1, -1]])
    cr = np.array([[2, -1, 4, -1, 6, -1, -1]])
    ft = np.array([[0, -1, 1, -1, 2, -1, -1]])
    th = np.array([[0.5, 0, 0.5, 0, 0.5, 0, 0]])
    cov = np.array([[5, 2, 3, 1, 2, 1, 1.0]])
    val = np.array([[0, -1, 0, -1, 0, 1, 0.5]])[:, :, None]
    return cl, cr, ft, th, val, cov


def duplicates_tree():
    """GPUTreeShap's BasicPathsWithDuplicates: f0 split at 0.5, 1.5 and 2.5 on one path; leaves -1, 1, 2, 3."""
    cl = np.array([[1, -1, 3, -1, 5, -1, -1]])
    cr = np.array([[2, -1, 4, -1, 6, -1, -1]])
    ft = np.array([[0, -1, 0, -1, 0, -1, -1]])
    th = np.array([[0.5, 0, 1.5, 0, 2.5, 0, 0]])
    cov = np.array([[3, 1, 2, 1, 1, 0.5, 0.5]])
    val = np.array([[0, -1, 0, 1, 0, 2, 3.0]])[:, :, None]
    return cl, cr, ft, th, val, cov
