"""BibTeX of the papers the losses implement (read by the sentence-transformers model card)."""

CODIEMB = """
@misc{zhang2025codiemb,
    title={CoDiEmb: A Collaborative yet Distinct Framework for Unified Representation Learning in Information Retrieval and Semantic Textual Similarity},
    author={Bowen Zhang and Zixin Song and Chunquan Chen and Qian-Wen Zhang and Di Yin and Xing Sun},
    year={2025},
    url={https://github.com/TencentCloudADP/youtu-embedding},
}
"""

ANGLE = """
@misc{li2023angleoptimized,
    title={AnglE-optimized Text Embeddings},
    author={Xianming Li and Jing Li},
    year={2023},
    eprint={2309.12871},
    archivePrefix={arXiv},
    primaryClass={cs.CL},
}
"""

INSTRUCTOR = """
@inproceedings{su2023one,
    title={One Embedder, Any Task: Instruction-Finetuned Text Embeddings},
    author={Hongjin Su and Weijia Shi and Jungo Kasai and Yizhong Wang and Yushi Hu and Mari Ostendorf and Wen-tau Yih and Noah A. Smith and Luke Zettlemoyer and Tao Yu},
    booktitle={Findings of the Association for Computational Linguistics: ACL 2023},
    year={2023},
    eprint={2212.09741},
    archivePrefix={arXiv},
}
"""

DATA_CUBE = """
@inproceedings{min2024datacube,
    title={Data-CUBE: Data Curriculum for Instruction-based Sentence Representation Learning},
    author={Yingqian Min and Kun Zhou and Dawei Gao and Wayne Xin Zhao and He Hu and Yaliang Li},
    booktitle={Findings of the Association for Computational Linguistics: ACL 2024},
    year={2024},
}
"""
