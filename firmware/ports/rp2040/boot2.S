/* RP2040 boot stage 2 for quarl-edge (our own; the source of the bytes in boot2.c).
 *
 * The RP2040 bootrom reads the first 256 bytes of the QSPI flash into the top of SRAM
 * (0x20041F00), checks their CRC-32 (poly 0x04C11DB7, init 0xFFFFFFFF, not reflected, no final
 * xor, over bytes 0..251, compared with the little-endian word at 252) and runs them. This code
 * then:
 *   1. sets the flash interface (SSI, a Synopsys DW_apb_ssi at 0x18000000) up for execute-in-place
 *      with the plainest command every SPI NOR flash has: 03h "read data", 24-bit address, one data
 *      line, no dummy cycles, SCK = clk_sys / 4 (the Pico's W25Q16JV takes 03h up to 50 MHz; with
 *      clk_sys at 125 MHz that is 31.25 MHz);
 *   2. points VTOR at the application's vector table right after this block (0x10000100), loads
 *      the initial stack pointer from its entry 0 and jumps to its reset handler (entry 1).
 * It uses no stack and no RAM, and is position-independent (literal-pool loads only).
 *
 * Regenerate boot2.c after editing this file: python3 firmware/ports/rp2040/boot2.py
 * (tests/test_ports_rp2040_teensy.py checks that boot2.c matches this source and its CRC). */
    .syntax unified
    .cpu cortex-m0plus
    .thumb

    .equ SSI_BASE,          0x18000000
    .equ SSI_CTRLR0,        0x00    /* frame format, frame size, transfer mode */
    .equ SSI_CTRLR1,        0x04    /* NDF: data frames per transfer, minus 1 */
    .equ SSI_SSIENR,        0x08    /* 1: enabled (most registers are written only while 0) */
    .equ SSI_BAUDR,         0x14    /* SCK = clk_sys / BAUDR (even) */
    .equ SSI_SPI_CTRLR0,    0xF4    /* XIP command, instruction/address lengths */

    /* CTRLR0: SPI_FRF [22:21] = 0 standard SPI, DFS_32 [20:16] = 31 (32-bit frames),
     * TMOD [9:8] = 3 EEPROM read (send the command/address, then receive). */
    .equ CTRLR0_XIP,        (0 << 21) | (31 << 16) | (3 << 8)
    /* SPI_CTRLR0: XIP_CMD [31:24] = 03h, INST_L [9:8] = 2 (8-bit instruction),
     * ADDR_L [5:2] = 6 (24 address bits, in 4-bit units), TRANS_TYPE [1:0] = 0 (instruction and
     * address on one line), WAIT_CYCLES [15:11] = 0. */
    .equ SPI_CTRLR0_XIP,    (0x03 << 24) | (2 << 8) | (6 << 2) | (0 << 0)
    .equ SCK_DIVIDER,       4

    .equ APP_VECTORS,       0x10000100  /* XIP base + 256: what follows this block in flash */
    .equ M0PLUS_VTOR,       0xE000ED08

    .section .text
    .global qe_boot2_entry
    .type qe_boot2_entry, %function
qe_boot2_entry:
    ldr     r3, =SSI_BASE
    movs    r1, #0
    str     r1, [r3, #SSI_SSIENR]       /* disable the SSI while configuring it */
    movs    r1, #SCK_DIVIDER
    str     r1, [r3, #SSI_BAUDR]
    ldr     r1, =CTRLR0_XIP
    str     r1, [r3, #SSI_CTRLR0]
    ldr     r1, =SPI_CTRLR0_XIP
    ldr     r0, =SSI_BASE + SSI_SPI_CTRLR0  /* offset too large for a Thumb-1 str immediate */
    str     r1, [r0]
    movs    r1, #0
    str     r1, [r3, #SSI_CTRLR1]       /* one 32-bit frame per XIP access */
    movs    r1, #1
    str     r1, [r3, #SSI_SSIENR]       /* enable: flash reads at 0x10000000 now go through XIP */

    ldr     r0, =APP_VECTORS
    ldr     r1, =M0PLUS_VTOR
    str     r0, [r1]
    ldmia   r0!, {r1, r2}               /* r1 = initial SP, r2 = reset handler (Thumb bit set) */
    msr     msp, r1
    bx      r2

    .ltorg
    .size qe_boot2_entry, . - qe_boot2_entry
