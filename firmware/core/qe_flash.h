/* QE_FLASH: the qualifier of the model's constant arrays (weights, biases, requantization
 * tables, lookup tables) and of the kernel parameters that point to them.
 *
 * On AVR (Harvard architecture) `const` data is copied into RAM at reset unless it lives in a
 * named address space: with QE_FLASH = __flash the arrays stay in flash and the kernels read
 * them with LPM (the compiler does it; the C stays plain array indexing). Everywhere else
 * QE_FLASH is empty and the code is exactly ordinary const C99.
 *
 * The rule, for generated code and kernels alike: an array the generator emits is
 * `static const QE_FLASH T name[]`, and a kernel pointer parameter (or params-struct member)
 * that receives one is `const QE_FLASH T *`. Params structs themselves stay ordinary `const`
 * (read by value, a few bytes of RAM each on AVR). A missing array is QE_FLASH_NULL. AVR
 * boards build with -Waddr-space-convert, so passing a flash array where a RAM pointer is
 * expected (or the reverse) fails the build instead of silently reading the wrong memory. */
#ifndef QE_FLASH_H
#define QE_FLASH_H

#if defined(__AVR__)
#if defined(__STRICT_ANSI__)
#error "AVR builds need the __flash address space: compile with -std=gnu99 (boards/<id>.toml cflags)"
#endif
#define QE_FLASH __flash
#else
#define QE_FLASH
#endif

/* A null QE_FLASH pointer (an absent bias). Not NULL: that is ((void *)0), a pointer in the
 * generic address space, which -Waddr-space-convert refuses; a plain 0 is a null pointer
 * constant of any address space. */
#define QE_FLASH_NULL 0

#endif /* QE_FLASH_H */
